package clock_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordkit/coordkit/libs/clock"
)

func TestSteadyIgnoresSteps(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := clock.NewFake(start)
	s := clock.NewSteady(f)
	f.Advance(1500 * time.Millisecond)
	f.Step(time.Hour)
	if got, want := s.Now(), start.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("after +1h step: Now = %v, want %v", got, want)
	}
	if got := s.Drift(); got != time.Hour {
		t.Fatalf("Drift = %v, want 1h", got)
	}
	f.Step(-2 * time.Hour)
	f.Advance(time.Second)
	if got, want := s.Now(), start.Add(2500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("after -2h step: Now = %v, want %v", got, want)
	}
	if got, want := s.UnixMilli(), start.Add(2500*time.Millisecond).UnixMilli(); got != want {
		t.Fatalf("UnixMilli = %d, want %d", got, want)
	}
}

func TestWatcherCountsStepsOnce(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(time.Now())
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	w, err := clock.NewWatcher(clock.WatchConfig{
		Source: f, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Time passing and NTP-sized slewing are no step.
	for range 10 {
		f.Advance(time.Second)
		f.Step(400 * time.Microsecond)
		if s := w.Check(); s != 0 {
			t.Fatalf("slew counted as a step of %v", s)
		}
	}
	f.Step(time.Hour)
	if s := w.Check(); s < time.Hour-time.Millisecond || s > time.Hour+time.Millisecond {
		t.Fatalf("step +1h: Check = %v", s)
	}
	for range 3 { // the same step is not counted again
		f.Advance(time.Second)
		if s := w.Check(); s != 0 {
			t.Fatalf("step counted again: %v", s)
		}
	}
	f.Step(-time.Hour - 5*time.Second)
	if s := w.Check(); s > -time.Hour {
		t.Fatalf("step -1h5s: Check = %v", s)
	}
	if got := gauge(t, reg, "coordkit_clock_steps_total"); got != 2 {
		t.Fatalf("coordkit_clock_steps_total = %v, want 2", got)
	}
	if w.Steps() != 2 {
		t.Fatalf("Steps = %d, want 2", w.Steps())
	}
	if n := strings.Count(logs.String(), "wall clock was stepped"); n != 2 {
		t.Fatalf("logged %d steps, want 2:\n%s", n, logs.String())
	}
	// drift since start: 10 × 0.4ms + 1h − 1h5s
	if got := gauge(t, reg, "coordkit_clock_drift_seconds"); got > -4.99 || got < -5.01 {
		t.Fatalf("coordkit_clock_drift_seconds = %v, want about -5", got)
	}
}

// gauge is the value of the one metric called name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}
