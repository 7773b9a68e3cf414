package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// scheduleRun is how long TestScheduleUnderKills lets its every-second schedule run.
const scheduleRun = 15 * time.Second

// TestScheduleUnderKills runs a schedule that ticks every second on 3 coord instances over
// one PostgreSQL schema while the instances are killed with SIGKILL one after another and
// started again (one is always up). It attacks the atomic fire: every tick from the first to
// the last one fired put exactly one task (none lost to a kill in the middle of a fire, none
// fired twice by two instances or by one retrying after a restart), with the id the tick
// names.
func TestScheduleUnderKills(t *testing.T) {
	t.Parallel()
	ins := startCluster(t, 3, append(backendArgs(t, "postgres"), "--task-schedule-interval", "100ms")...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, name := testenv.Prefix(t), "beat"
	api := ins[0].Client().Tasks()
	put, err := api.PutSchedule(ctx, &taskpickv1.PutScheduleRequest{Backend: "postgres", Pool: pool, Name: name, Spec: "* * * * * *",
		Template: &taskpickv1.ScheduleTemplate{Payload: []byte("beat")}})
	if err != nil {
		t.Fatalf("PutSchedule: %v", err)
	}
	first := put.GetSchedule().GetNextFire().AsTime()

	end := time.Now().Add(scheduleRun)
	kills := 0
	for i := 0; time.Now().Before(end); i++ {
		victim := ins[i%len(ins)]
		time.Sleep(time.Duration(700+(i*337)%1500) * time.Millisecond) // kills land anywhere in a tick
		victim.Stop()
		kills++
		time.Sleep(500 * time.Millisecond)
		victim.Start()
	}

	// Freeze the schedule on an instance that is up, then read every task it put.
	paused, err := ins[1].Client().Tasks().PauseSchedule(ctx, &taskpickv1.PauseScheduleRequest{Backend: "postgres", Pool: pool, Name: name})
	if err != nil {
		t.Fatalf("PauseSchedule: %v", err)
	}
	last := paused.GetSchedule().GetLastFire().AsTime()
	var want []string
	for tk := first; !tk.After(last); tk = tk.Add(time.Second) {
		want = append(want, name+"@"+tk.UTC().Format(time.RFC3339))
	}
	var got []string
	for {
		r, err := ins[2].Client().Tasks().Pick(ctx, &taskpickv1.PickRequest{Backend: "postgres", Pool: pool, Count: 100})
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		if len(r.GetTasks()) == 0 {
			break
		}
		for _, task := range r.GetTasks() {
			got = append(got, task.GetId())
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%d kills: tasks\n%v\nwant one per tick from %v to %v\n%v", kills, got, first, last, want)
	}
	if len(want) < int(scheduleRun/time.Second)-3 {
		t.Fatalf("only %d ticks fired in %v", len(want), scheduleRun)
	}
	t.Logf("%d ticks, %d tasks, %d SIGKILLs", len(want), len(got), kills)
}
