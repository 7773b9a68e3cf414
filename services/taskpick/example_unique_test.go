package taskpick_test

import (
	"context"
	"fmt"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// Enqueue the nightly report unless one is already waiting or running: the second Put is a
// duplicate and names the report that holds the key.
func ExampleClient_Put_unique() {
	url, stop := exampleTaskServer()
	defer stop()
	c := client.New(url)
	ctx := context.Background()

	for _, id := range []string{"report:1", "report:2"} {
		r, err := c.Put(ctx, "reports", id, []byte("nightly"), client.WithUniqueKey("nightly-report"),
			client.WithUniqueScope(taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE))
		if err != nil {
			fmt.Println("put:", err)
			return
		}
		fmt.Printf("put %s: created %v, duplicate %v, task %s (%v)\n", id, r.Created, r.Duplicate, r.ID, r.State)
	}
	// Output:
	// put report:1: created true, duplicate false, task report:1 (STATE_UNSPECIFIED)
	// put report:2: created false, duplicate true, task report:1 (STATE_AVAILABLE)
}
