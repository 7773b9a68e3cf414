package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/testenv"
)

// serviceMetricRE is the one pattern of every service's own series:
// coordkit_<service>_<thing>_<unit>, as docs/architecture.md (Metrics) lists them.
var serviceMetricRE = regexp.MustCompile(`^coordkit_(lock|idgen|taskpick)_[a-z]+(_[a-z]+)*_(total|seconds|in_flight)$`)

// TestMetricNames: after one call of each service, every series coord serve exports is either
// a shared library's (rpc, streams, events, clock) or a service's named by the one pattern,
// and the task-pick calls counter that repeated coordkit_rpc_requests_total is gone.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	url := serve(t)
	pool := testenv.Prefix(t)
	for _, args := range [][]string{
		{"lock", "acquire", pool, "--ttl", "1m"},
		{"id", "next", "--mode", "snowflake"},
		{"task", "put", pool, "a"},
		{"task", "pick", pool},
	} {
		if out, err := coord(t, append(args, "--server", url)...); err != nil {
			t.Fatalf("coord %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "coordkit_") {
			names[f[2]] = true
		}
	}
	for name := range names {
		switch {
		case serviceMetricRE.MatchString(name):
		case strings.HasPrefix(name, "coordkit_rpc_"), strings.HasPrefix(name, "coordkit_streams_"),
			strings.HasPrefix(name, "coordkit_events_"), strings.HasPrefix(name, "coordkit_clock_"):
		default:
			t.Errorf("/metrics has %s, which is not coordkit_<lock|idgen|taskpick>_<thing>_<total|seconds|in_flight> nor a shared library's", name)
		}
	}
	for _, want := range []string{"coordkit_rpc_requests_total", "coordkit_lock_acquire_total", "coordkit_idgen_ids_total", "coordkit_taskpick_tasks_total"} {
		if !names[want] {
			t.Errorf("/metrics has no %s after a call that counts it (has %v)", want, names)
		}
	}
}
