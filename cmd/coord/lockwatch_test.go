package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCLIWatch: `coord lock watch KEY --json` prints the state, then one JSON line per event
// of a fair acquire and release made with the CLI, and exits 0 when interrupted.
func TestCLIWatch(t *testing.T) {
	t.Parallel()
	url := serve(t)
	const key = "cli:watch"
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"lock", "watch", key, "--server", url, "--json"}, &out, &out) }()
	lines := func(n int) []string {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if ls := strings.Split(strings.TrimSpace(out.String()), "\n"); len(ls) >= n && ls[0] != "" {
				return ls
			}
			if time.Now().After(deadline) {
				t.Fatalf("watch printed %q, want %d lines", out.String(), n)
			}
		}
	}
	if first := lines(1)[0]; !strings.Contains(first, `"state"`) {
		t.Fatalf("first line %q, want the state", first)
	}
	res, err := coord(t, "lock", "acquire", key, "--server", url, "--wait", "1s", "--fair", "--json")
	if err != nil {
		t.Fatalf("acquire --fair: %v\n%s", err, res)
	}
	var acq struct{ Lease struct{ Owner string } }
	if err := json.Unmarshal([]byte(res), &acq); err != nil {
		t.Fatal(err)
	}
	if res, err := coord(t, "lock", "release", key, "--server", url, "--owner", acq.Lease.Owner); err != nil {
		t.Fatalf("release: %v\n%s", err, res)
	}
	ls := lines(3)
	for i, want := range []string{"LOCK_EVENT_KIND_ACQUIRED", "LOCK_EVENT_KIND_RELEASED"} {
		var msg struct{ Event struct{ Kind, Key string } }
		if err := json.Unmarshal([]byte(ls[i+1]), &msg); err != nil || msg.Event.Kind != want || msg.Event.Key != key {
			t.Fatalf("line %d = %q (%v), want a %s event of %s", i+2, ls[i+1], err, want, key)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v on interrupt, want nil (exit 0)", err)
	}
	if _, err := coord(t, "lock", "watch", "--server", url); err == nil {
		t.Fatal("watch with neither KEY nor --prefix succeeded")
	}
}
