package taskpick_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// A schedule stored in the backend puts one task a tick into its pool, whichever instances
// of the service are up; a worker picks them like any other task. Each task's id names its
// schedule and tick.
func Example_schedule() {
	url, stop := exampleTaskServer()
	defer stop()
	c := client.New(url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s, err := c.Schedules().Put(ctx, &taskpickv1.PutScheduleRequest{
		Pool: "reports", Name: "heartbeat", Spec: "@every 1s",
		Template: &taskpickv1.ScheduleTemplate{Payload: []byte(`{"check":"all"}`)},
	})
	if err != nil {
		fmt.Println("put schedule:", err)
		return
	}
	fmt.Println(s.GetName(), s.GetSpec(), s.GetTimezone(), s.GetMissed())

	err = c.Work(ctx, "reports", func(ctx context.Context, t *client.Task) error {
		name, tick, _ := strings.Cut(t.ID, "@")
		fmt.Println("task of", name, "for tick", tick == s.GetNextFire().AsTime().Format("2006-01-02T15:04:05Z"), string(t.Payload))
		cancel()
		return nil
	})
	if err != nil {
		fmt.Println("work:", err)
	}
	for sc, err := range c.Schedules().List(context.Background(), "", "reports") {
		if err != nil {
			fmt.Println("list:", err)
			return
		}
		fmt.Println("listed", sc.GetName())
	}
	// Output:
	// heartbeat @every 1s UTC SCHEDULE_MISSED_SKIP
	// task of heartbeat for tick true {"check":"all"}
	// listed heartbeat
}
