package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// TestCLITaskSchedule drives every `coord task schedule` command against a real service: an
// every-second schedule puts its tasks, and put, get, list, pause, resume and delete print
// what they did, in human and JSON form; bad specs and policies are refused.
func TestCLITaskSchedule(t *testing.T) {
	t.Parallel()
	url := serve(t)
	pool := testenv.Prefix(t)
	run := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		return coord(t, append(append([]string{"task"}, args...), "--server", url)...)
	}
	ok := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := run(t, args...)
		if err != nil {
			t.Fatalf("coord task %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out := ok(t, "schedule", "put", pool, "beat", "@every 1s", "--payload", "hi", "--missed", "run-once"); !strings.Contains(out, "running  missed=run-once") {
		t.Fatalf("put printed %q", out)
	}
	ok(t, "schedule", "put", pool, "nightly", "0 3 * * *", "--timezone", "Europe/Berlin")
	var got struct {
		Schedule struct {
			Timezone string    `json:"timezone"`
			NextFire time.Time `json:"nextFire"`
		} `json:"schedule"`
	}
	if err := json.Unmarshal([]byte(ok(t, "schedule", "get", pool, "nightly", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if got.Schedule.Timezone != "Europe/Berlin" || got.Schedule.NextFire.In(berlin).Hour() != 3 {
		t.Fatalf("get --json = %+v, want 03:00 in Berlin", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(ok(t, "stats", pool), "available=2") {
		if time.Now().After(deadline) {
			t.Fatalf("the every-second schedule put no two tasks in 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := ok(t, "schedule", "list", pool, "--limit", "1"); !strings.Contains(out, pool+"/beat") || strings.Contains(out, "nightly") {
		t.Fatalf("list --limit 1 printed %q", out)
	}
	if out := ok(t, "schedule", "pause", pool, "beat"); !strings.Contains(out, "paused") || !strings.Contains(out, "next-fire=-") {
		t.Fatalf("pause printed %q", out)
	}
	if out := ok(t, "schedule", "resume", pool, "beat"); !strings.Contains(out, "running") {
		t.Fatalf("resume printed %q", out)
	}
	if out := ok(t, "schedule", "delete", pool, "beat"); out != "deleted schedule "+pool+"/beat\n" {
		t.Fatalf("delete printed %q", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "get", pool, "beat"}, "not_found"},
		{[]string{"schedule", "put", pool, "x", "0 0 30 2 *"}, "never fire"},
		{[]string{"schedule", "put", pool, "x", "61 * * * *"}, "not a cron spec"},
		{[]string{"schedule", "put", pool, "x", "@daily", "--timezone", "Mars/Base"}, "timezone"},
		{[]string{"schedule", "put", pool, "x", "@daily", "--missed", "twice"}, "--missed"},
		{[]string{"schedule", "put", pool, "x"}, "POOL NAME SPEC"},
	} {
		out, err := run(t, c.args...)
		if err == nil || !strings.Contains(out+err.Error(), c.want) {
			t.Errorf("coord task %s = %v\n%s; want an error with %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
}
