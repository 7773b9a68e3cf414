package main

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBenchContendSQLite runs `coordbench contend` briefly on the embedded backend, which
// needs nothing installed, so that the program cannot rot: two instances sharing one SQLite
// file, sixteen clients on one key, every handoff exclusive, plain and in fair mode.
func TestBenchContendSQLite(t *testing.T) {
	t.Parallel()
	targets := []string{targetServiceSQLite, targetServiceSQLiteFair}
	out, err := coordbench(t, "contend", "--targets", strings.Join(targets, ","), "--duration", "1s", "--warmup", "200ms", "--json")
	if err != nil {
		t.Fatalf("bench contend: %v\n%s", err, out)
	}
	var report struct {
		Results []contendResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("bench contend --json printed %q: %v", out, err)
	}
	if len(report.Results) != len(targets) {
		t.Fatalf("bench contend --json = %d results, want %d (%s)\n%s", len(report.Results), len(targets), strings.Join(targets, ", "), out)
	}
	for i, r := range report.Results {
		if r.Target != targets[i] || r.Clients != 16 || r.Instances != 2 {
			t.Errorf("result %d is %s with %d clients on %d instances, want %s, 16, 2", i, r.Target, r.Clients, r.Instances, targets[i])
		}
		if r.Handoffs == 0 || r.WaitMax == 0 || r.ShareMax == 0 || r.ShareSpread == nil {
			t.Errorf("%s: result %+v measured nothing, want handoffs, waits and a share spread", r.Target, r)
		}
		if r.Errors != 0 || r.Overlaps != 0 || r.StaleTokens != 0 {
			t.Errorf("%s: result %+v has errors or violations, want none (first error %q, first violation %q)", r.Target, r, r.FirstError, r.FirstViolation)
		}
	}
}

// TestContendShareSpread checks `share ±%`, the largest distance of one client's
// acquisitions from the mean in percent of the mean, and the naming of fair targets.
func TestContendShareSpread(t *testing.T) {
	t.Parallel()
	clients := func(shares ...int) []contendClient {
		cs := make([]contendClient, len(shares))
		for i, n := range shares {
			cs[i].waits = make([]time.Duration, n)
		}
		return cs
	}
	for _, tt := range []struct {
		shares []int
		want   float64
	}{
		{shares: []int{10, 10, 10, 10}, want: 0},
		{shares: []int{8, 10, 10, 12}, want: 20},  // mean 10, farthest 2 away
		{shares: []int{0, 10, 10, 20}, want: 100}, // mean 10, a starved client
		{shares: []int{1, 1, 1, 5}, want: 150},    // mean 2, the greedy client 3 above it
	} {
		got := shareSpread(clients(tt.shares...))
		if got == nil || math.Abs(*got-tt.want) > 1e-9 {
			t.Errorf("shareSpread(%v) = %v, want %v", tt.shares, got, tt.want)
		}
	}
	if got := shareSpread(clients(0, 0)); got != nil {
		t.Errorf("shareSpread(0, 0) = %v, want nil (no acquisitions)", *got)
	}
	for target, want := range map[string][3]string{
		targetServiceRedisFair:    {targetServiceRedis, "redis", "fair"},
		targetServiceMySQLFair:    {targetServiceMySQL, "mysql", "fair"},
		targetServicePostgresFair: {targetServicePostgres, "postgres", "fair"},
		targetServiceSQLiteFair:   {targetServiceSQLite, "sqlite", "fair"},
		targetServiceSQLite:       {targetServiceSQLite, "sqlite", ""},
		targetServiceZooKeeper:    {targetServiceZooKeeper, "zookeeper", ""},
	} {
		plain, backend, fair := contendBackend(target)
		if plain != want[0] || backend != want[1] || fair != (want[2] == "fair") {
			t.Errorf("contendBackend(%q) = %q, %q, %v; want %q, %q, %v", target, plain, backend, fair, want[0], want[1], want[2] == "fair")
		}
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

// TestBenchContendUsage checks that coordbench names the subcommand and that a bad
// target is refused before anything starts.
func TestBenchContendUsage(t *testing.T) {
	t.Parallel()
	out, err := coordbench(t)
	if err != nil || !strings.Contains(out, "contend") {
		t.Errorf("coordbench = %v\n%s; want help naming contend", err, out)
	}
	out, err = coordbench(t, "contend", "--targets", "redsync/redlock")
	if err == nil || !strings.Contains(err.Error(), "unknown target") {
		t.Errorf("coordbench contend --targets redsync/redlock = %v\n%s; want unknown target", err, out)
	}
}
