package taskpick_test

import (
	"context"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// A pool's settings: failed tasks back off exponentially (Work sends no delay of its own, so
// the pool's policy decides), tasks get 5 attempts unless put with their own, and the pool
// can be paused while something downstream is down, and a task cancelled before it runs.
func Example_poolSettings() {
	url, stop := exampleTaskServer()
	defer stop()
	ctx := context.Background()
	c := client.New(url)
	emails := c.Pool("", "emails")

	s, err := emails.SetSettings(ctx, client.PoolSettings{
		Retry:       &client.RetryPolicy{Initial: 10 * time.Second, Multiplier: 3, Max: 10 * time.Minute, Jitter: 0.2},
		MaxAttempts: 5,
	})
	if err != nil {
		fmt.Println("set:", err)
		return
	}
	fmt.Printf("retry after %v, ×%g, up to %v; %d attempts\n", s.Retry.Initial, s.Retry.Multiplier, s.Retry.Max, s.MaxAttempts)

	if err := emails.Pause(ctx); err != nil {
		fmt.Println("pause:", err)
		return
	}
	c.Tasks().Put(ctx, &taskpickv1.PutRequest{Pool: "emails", Tasks: []*taskpickv1.NewTask{{Id: "welcome:ada"}, {Id: "welcome:bob"}}}) //nolint:errcheck // shown below
	r, _ := c.Tasks().Pick(ctx, &taskpickv1.PickRequest{Pool: "emails"})
	fmt.Println("picked while paused:", len(r.GetTasks()))

	fmt.Println("cancel bob:", emails.Cancel(ctx, "welcome:bob"))
	emails.Resume(ctx) //nolint:errcheck // the Pick shows it
	r, _ = c.Tasks().Pick(ctx, &taskpickv1.PickRequest{Pool: "emails", Count: 10})
	for _, t := range r.GetTasks() {
		fmt.Printf("picked %s, attempt %d of %d\n", t.GetId(), t.GetAttempt(), t.GetMaxAttempts())
	}
	// Output:
	// retry after 10s, ×3, up to 10m0s; 5 attempts
	// picked while paused: 0
	// cancel bob: <nil>
	// picked welcome:ada, attempt 1 of 5
}
