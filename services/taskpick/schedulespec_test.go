package taskpick

import (
	"slices"
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

// TestSpecAcrossDST pins what a zone's clock changes do to ticks (robfig/cron's reading,
// documented in docs/api.md): a wall time the spring change skips has no tick that day, one
// the autumn change repeats ticks at both instants, each a task of its own UTC tick, and
// every tick is strictly after the one before.
func TestSpecAcrossDST(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		spec, from string
		want       []string
	}{
		{"30 2 * * *", "2027-03-27T12:00:00Z", nil}, // 02:30 never happens on 03-28
		{"30 2 * * *", "2026-10-24T12:00:00Z", []string{"2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"}},
		{"0 3 * * *", "2027-03-27T12:00:00Z", []string{"2027-03-28T01:00:00Z"}},
		{"0 3 * * *", "2026-10-24T12:00:00Z", []string{"2026-10-25T02:00:00Z"}},
	} {
		c, err := parseSpec(tt.spec, "Europe/Berlin", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		at, _ := time.Parse(time.RFC3339, tt.from)
		end := at.Add(36 * time.Hour)
		var got []string
		for n := c.next(at); n.Before(end); n = c.next(n) {
			if !n.After(at) {
				t.Fatalf("%s: tick %v is not after %v", tt.spec, n, at)
			}
			got, at = append(got, n.Format(time.RFC3339)), n
		}
		if !slices.Equal(got, tt.want) {
			t.Fatalf("%s from %s: ticks %v, want %v", tt.spec, tt.from, got, tt.want)
		}
	}
}
