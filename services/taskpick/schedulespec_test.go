package taskpick

import (
	"testing"
	"time"
)

// TestPlanFire checks the missed-tick rule at its edges: a tick just under the grace late
// fires, one at the grace was missed; skip puts nothing for it, run-once one task named by
// it; either way the schedule moves to its first tick that is not missed.
func TestPlanFire(t *testing.T) {
	t.Parallel()
	c, err := parseSpec("* * * * * *", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	grace := 5 * time.Second
	for _, tt := range []struct {
		name     string
		missed   Missed
		late     time.Duration
		wantTask bool
		wantNext time.Time
	}{
		{"on time", MissedSkip, 0, true, t0.Add(time.Second)},
		{"late within the grace", MissedSkip, grace - time.Millisecond, true, t0.Add(time.Second)},
		{"missed, skip", MissedSkip, grace, false, t0.Add(time.Second)},
		{"missed long ago, skip", MissedSkip, time.Hour, false, t0.Add(time.Hour - grace + time.Second)},
		{"missed long ago, run once", MissedRunOnce, time.Hour, true, t0.Add(time.Hour - grace + time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := planFire(Schedule{Name: "s", NextFire: t0, Missed: tt.missed}, c, t0.Add(tt.late), grace)
			if (f.Task != nil) != tt.wantTask || !f.Next.Equal(tt.wantNext) || !f.Fired.Equal(t0) {
				t.Fatalf("plan %+v, want task %v and next %v", f, tt.wantTask, tt.wantNext)
			}
			if f.Task != nil && f.Task.ID != "s@2030-01-01T00:00:00Z" {
				t.Fatalf("task id %q, want it named by the tick", f.Task.ID)
			}
		})
	}
}
