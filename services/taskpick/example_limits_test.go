package taskpick_test

import (
	"context"
	"fmt"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// A pool's limits: at most 2 of its tasks leased at once by all workers together, and at
// most 100 leased a second in bursts of up to 10. A Pick over the limit leases what is left
// of it; a Pick with wait would wait for an Ack to free a place.
func Example_poolLimits() {
	url, stop := exampleTaskServer()
	defer stop()
	ctx := context.Background()
	c := client.New(url)
	reports := c.Pool("", "reports")

	s, err := reports.SetSettings(ctx, client.PoolSettings{MaxLeased: 2, Rate: 100, Burst: 10})
	if err != nil {
		fmt.Println("set:", err)
		return
	}
	fmt.Printf("max leased %d, %g a second, bursts of %d\n", s.MaxLeased, s.Rate, s.Burst)

	var tasks []*taskpickv1.NewTask
	for _, id := range []string{"r1", "r2", "r3", "r4"} {
		tasks = append(tasks, &taskpickv1.NewTask{Id: id})
	}
	c.Tasks().Put(ctx, &taskpickv1.PutRequest{Pool: "reports", Tasks: tasks}) //nolint:errcheck // shown below
	r, _ := c.Tasks().Pick(ctx, &taskpickv1.PickRequest{Pool: "reports", Count: 4})
	fmt.Println("picked of 4:", len(r.GetTasks()))
	again, _ := c.Tasks().Pick(ctx, &taskpickv1.PickRequest{Pool: "reports"})
	fmt.Println("picked at the limit:", len(again.GetTasks()))

	first := r.GetTasks()[0]
	c.Tasks().Ack(ctx, &taskpickv1.AckRequest{Pool: "reports", Id: first.GetId(), LeaseToken: first.GetLeaseToken(), LeaseSecret: first.GetLeaseSecret()}) //nolint:errcheck // shown below
	r, _ = c.Tasks().Pick(ctx, &taskpickv1.PickRequest{Pool: "reports", Count: 4})
	fmt.Println("picked after an ack:", len(r.GetTasks()))
	// Output:
	// max leased 2, 100 a second, bursts of 10
	// picked of 4: 2
	// picked at the limit: 0
	// picked after an ack: 1
}
