package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBenchContendSQLite runs `coord bench contend` briefly on the embedded backend, which
// needs nothing installed, so that the program cannot rot: two instances sharing one SQLite
// file, sixteen clients on one key, every handoff exclusive.
func TestBenchContendSQLite(t *testing.T) {
	t.Parallel()
	out, err := coord(t, "bench", "contend", "--targets", "service/sqlite", "--duration", "1s", "--warmup", "200ms", "--json")
	if err != nil {
		t.Fatalf("bench contend: %v\n%s", err, out)
	}
	var report struct {
		Results []contendResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("bench contend --json printed %q: %v", out, err)
	}
	if len(report.Results) != 1 {
		t.Fatalf("bench contend --json = %d results, want 1 (service/sqlite)\n%s", len(report.Results), out)
	}
	r := report.Results[0]
	if r.Target != targetServiceSQLite || r.Clients != 16 || r.Instances != 2 {
		t.Errorf("result is %s with %d clients on %d instances, want service/sqlite, 16, 2", r.Target, r.Clients, r.Instances)
	}
	if r.Handoffs == 0 || r.WaitMax == 0 || r.ShareMax == 0 {
		t.Errorf("result %+v measured nothing, want handoffs and waits", r)
	}
	if r.Errors != 0 || r.Overlaps != 0 || r.StaleTokens != 0 {
		t.Errorf("result %+v has errors or violations, want none (first error %q, first violation %q)", r, r.FirstError, r.FirstViolation)
	}
}

// TestContendCountsViolations checks the exclusion checker itself: a "lock" that lets every
// client in with the same token must show overlaps and stale tokens, and a real mutex with
// rising tokens must show none.
func TestContendCountsViolations(t *testing.T) {
	t.Parallel()
	noRelease := func(context.Context) error { return nil }
	broken := func(context.Context) (uint64, func(context.Context) error, error) {
		return 7, noRelease, nil
	}
	var mu sync.Mutex
	var token atomic.Uint64
	mutex := func(context.Context) (uint64, func(context.Context) error, error) {
		mu.Lock()
		return token.Add(1), func(context.Context) error { mu.Unlock(); return nil }, nil
	}
	for _, tt := range []struct {
		name       string
		lock       contendLock
		violations bool
	}{
		{name: "no exclusion", lock: broken, violations: true},
		{name: "mutex", lock: mutex, violations: false},
	} {
		locks := []contendLock{tt.lock, tt.lock, tt.lock, tt.lock}
		r := runContention(t.Context(), locks, 3*time.Millisecond, 0, 200*time.Millisecond, time.Second)
		if r.Handoffs == 0 || r.Errors != 0 {
			t.Errorf("%s: %d handoffs, %d errors; want some handoffs and no errors", tt.name, r.Handoffs, r.Errors)
		}
		if got := r.Overlaps > 0 && r.StaleTokens > 0; got != tt.violations {
			t.Errorf("%s: %d overlaps, %d stale tokens (first: %q); want violations: %v", tt.name, r.Overlaps, r.StaleTokens, r.FirstViolation, tt.violations)
		}
		if !tt.violations && r.Overlaps+r.StaleTokens != 0 {
			t.Errorf("%s: %d overlaps, %d stale tokens (first: %q); want none", tt.name, r.Overlaps, r.StaleTokens, r.FirstViolation)
		}
	}
}

// TestBenchContendUsage checks that `coord bench` names the subcommand and that a bad
// target is refused before anything starts.
func TestBenchContendUsage(t *testing.T) {
	t.Parallel()
	out, err := coord(t, "bench")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out, "contend") {
		t.Errorf("coord bench = %v\n%s; want usage naming contend", err, out)
	}
	out, err = coord(t, "bench", "contend", "--targets", "redsync/redlock")
	if err == nil || !strings.Contains(err.Error(), "unknown target") {
		t.Errorf("coord bench contend --targets redsync/redlock = %v\n%s; want unknown target", err, out)
	}
}
