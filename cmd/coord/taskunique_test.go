package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/testenv"
)

// TestCLITaskPutUnique: `coord task put --unique` prints a duplicate plainly, naming the task
// that holds the key and its state, exits 0, and --json carries the API's answer; bad scope
// flags are usage errors, and what the service refuses is its invalid_argument.
func TestCLITaskPutUnique(t *testing.T) {
	t.Parallel()
	url := serve(t)
	pool := testenv.Prefix(t)
	task := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := coord(t, append(append([]string{"task"}, args...), "--server", url)...)
		if err != nil {
			t.Fatalf("coord task %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out := task(t, "put", pool, "r1", "--unique", "nightly"); out != "put "+pool+"/r1\n" {
		t.Fatalf("put printed %q", out)
	}
	want := `duplicate: ` + pool + `/r1 holds unique key "nightly" (available); r2 not added` + "\n"
	if out := task(t, "put", pool, "r2", "--unique", "nightly", "--unique-scope", "queued"); out != want {
		t.Fatalf("duplicate put printed %q, want %q", out, want)
	}
	var resp struct {
		Created       []bool   `json:"created"`
		Duplicate     []bool   `json:"duplicate"`
		ExistingID    []string `json:"existingId"`
		ExistingState []string `json:"existingState"`
	}
	if err := json.Unmarshal([]byte(task(t, "put", pool, "r3", "--unique", "nightly", "--json")), &resp); err != nil ||
		len(resp.Duplicate) != 1 || !resp.Duplicate[0] || resp.ExistingID[0] != "r1" || resp.ExistingState[0] != "STATE_AVAILABLE" {
		t.Fatalf("put --json: %v %+v, want a duplicate of r1", err, resp)
	}
	if out := task(t, "put", pool, "p1", "--unique", "weekly", "--unique-period", "1h"); out != "put "+pool+"/p1\n" {
		t.Fatalf("period put printed %q", out)
	}
	if out := task(t, "put", pool, "p2", "--unique", "weekly", "--unique-scope", "UNIQUE_SCOPE_PERIOD", "--unique-period", "1h"); !strings.Contains(out, "duplicate: "+pool+"/p1") {
		t.Fatalf("period duplicate printed %q", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--unique", "k", "--unique-scope", "forever"}, "--unique-scope: unknown scope"},
		{[]string{"--unique-scope", "active"}, "unique_scope"},
		{[]string{"--unique", "k", "--unique-scope", "period"}, "unique_period"},
		{[]string{"--unique", "k", "--unique-period", "-1s"}, "unique_period"},
		{[]string{"--unique", strings.Repeat("k", 513)}, "unique_key"},
	} {
		out, err := coord(t, append([]string{"task", "put", pool, "x", "--server", url}, c.args...)...)
		if err == nil || !strings.Contains(out+err.Error(), c.want) {
			t.Fatalf("put %v = %v\n%s; want an error with %q", c.args, err, out, c.want)
		}
	}
}
