package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/testenv"
)

// newer reports whether decimal token a is greater than b.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// leaseRE finds the lease (TOKEN:SECRET) in a human pick line: m[1] is all of it, m[2] the
// token.
var leaseRE = regexp.MustCompile(`lease=((\d+):[A-Z2-7]+)`)

// TestCLITaskRoundTrip drives every `coord task` command against a real service on each
// backend: put, pick, extend, fenced ack, nack until dead, dead, requeue, get and stats, in
// human and JSON form, and the errors of bad input.
func TestCLITaskRoundTrip(t *testing.T) {
	t.Parallel()
	url := serve(t, "--redis-addr", testenv.RedisAddr())
	for _, backend := range []string{"sqlite", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			pool := testenv.Prefix(t)
			task := func(t *testing.T, args ...string) string {
				t.Helper()
				out, err := coord(t, append(append([]string{"task"}, args...), "--server", url, "--backend", backend)...)
				if err != nil {
					t.Fatalf("coord task %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			fails := func(t *testing.T, want string, args ...string) {
				t.Helper()
				out, err := coord(t, append(append([]string{"task"}, args...), "--server", url, "--backend", backend)...)
				if err == nil || !strings.Contains(out+err.Error(), want) {
					t.Fatalf("coord task %s = %v\n%s; want an error with %q", strings.Join(args, " "), err, out, want)
				}
			}

			if out := task(t, "put", pool, "a", "--payload", "hello", "--priority", "5"); out != "put "+pool+"/a\n" {
				t.Fatalf("put printed %q", out)
			}
			if out := task(t, "put", pool, "a", "--payload", "other"); !strings.Contains(out, "already exists") {
				t.Fatalf("second put printed %q, want already exists", out)
			}
			file := filepath.Join(t.TempDir(), "payload")
			if err := os.WriteFile(file, []byte("from a file"), 0o600); err != nil {
				t.Fatal(err)
			}
			task(t, "put", pool, "later", "--payload-file", file, "--delay", "1h")
			var st struct{ Available, Delayed string }
			if err := json.Unmarshal([]byte(task(t, "stats", pool, "--json")), &st); err != nil || st.Available != "1" || st.Delayed != "1" {
				t.Fatalf("stats --json: %v (%+v), want 1 available and 1 delayed", err, st)
			}
			if out := task(t, "stats", pool); !strings.Contains(out, "available=1  delayed=1  leased=0") {
				t.Fatalf("stats printed %q", out)
			}

			var picked struct {
				Tasks []struct {
					ID          string `json:"id"`
					Payload     []byte `json:"payload"`
					LeaseToken  string `json:"leaseToken"`
					LeaseSecret string `json:"leaseSecret"`
					Attempt     int    `json:"attempt"`
				} `json:"tasks"`
			}
			if err := json.Unmarshal([]byte(task(t, "pick", pool, "--ttl", "1m", "--count", "10", "--json")), &picked); err != nil ||
				len(picked.Tasks) != 1 || picked.Tasks[0].ID != "a" || string(picked.Tasks[0].Payload) != "hello" {
				t.Fatalf("pick --json: %v (%+v), want task a with payload hello (the other is delayed)", err, picked)
			}
			token := picked.Tasks[0].LeaseToken
			lease := token + ":" + picked.Tasks[0].LeaseSecret
			if out := task(t, "pick", pool); !strings.Contains(out, "no task available") {
				t.Fatalf("pick of an emptied pool printed %q", out)
			}
			if out := task(t, "extend", pool, "a", lease, "--ttl", "2m"); !strings.Contains(out, "extended "+pool+"/a until") {
				t.Fatalf("extend printed %q", out)
			}
			fails(t, "failed_precondition", "ack", pool, "a", token+"0:"+picked.Tasks[0].LeaseSecret)
			fails(t, "failed_precondition", "ack", pool, "a", token+":"+strings.Repeat("A", 26)) // the token alone is public
			if out := task(t, "nack", pool, "a", lease, "--reason", "try again", "--retry-after", "0s"); !strings.Contains(out, "available again in 0s") {
				t.Fatalf("nack printed %q", out)
			}
			out := task(t, "pick", pool, "--order", "priority", "--wait", "1s")
			m := leaseRE.FindStringSubmatch(out)
			if !strings.HasPrefix(out, "a  ") || !strings.Contains(out, "attempt=2/25") || !strings.Contains(out, `payload="hello"`) || m == nil || !newer(m[2], token) {
				t.Fatalf("second pick printed %q, want task a at attempt 2 with a newer token than %s", out, token)
			}
			if out := task(t, "ack", pool, "a", m[1]); out != "acked "+pool+"/a\n" {
				t.Fatalf("ack printed %q", out)
			}
			fails(t, "not_found", "get", pool, "a")
			if out := task(t, "get", pool, "later"); !strings.Contains(out, "state=delayed") || !strings.Contains(out, `payload="from a file"`) {
				t.Fatalf("get printed %q", out)
			}

			// One attempt only: a nack makes it dead; dead lists it, requeue brings it back.
			task(t, "put", pool, "fragile", "--max-attempts", "1")
			m = leaseRE.FindStringSubmatch(task(t, "pick", pool))
			if m == nil {
				t.Fatal("pick printed no lease")
			}
			if out := task(t, "nack", pool, "fragile", m[1], "--reason", "boom"); !strings.Contains(out, "dead") {
				t.Fatalf("nack of the last attempt printed %q, want dead", out)
			}
			if out := task(t, "dead", pool); !strings.HasPrefix(out, "fragile  state=dead") || !strings.Contains(out, `last-error="boom"`) {
				t.Fatalf("dead printed %q", out)
			}
			out = task(t, "requeue", pool, "fragile", "nosuch")
			if !strings.Contains(out, "requeued "+pool+"/fragile\n") || !strings.Contains(out, "not requeued "+pool+"/nosuch: not dead") {
				t.Fatalf("requeue printed %q", out)
			}
			if out := task(t, "get", pool, "fragile"); !strings.Contains(out, "state=available") {
				t.Fatalf("get after requeue printed %q", out)
			}

			// Pool settings: set, get, pause (picks get nothing), resume; cancel.
			out = task(t, "pool", "set", pool, "--retry-initial", "2s", "--retry-max", "1m", "--retry-jitter", "0.5", "--max-attempts", "4")
			if !strings.Contains(out, "max-attempts=4") || !strings.Contains(out, "retry=2s×2 up to 1m0s, jitter 0.5") {
				t.Fatalf("pool set printed %q", out)
			}
			var settings struct {
				Settings struct {
					MaxAttempts int  `json:"maxAttempts"`
					Paused      bool `json:"paused"`
				} `json:"settings"`
				Stored bool `json:"stored"`
			}
			if err := json.Unmarshal([]byte(task(t, "pool", "get", pool, "--json")), &settings); err != nil || !settings.Stored || settings.Settings.MaxAttempts != 4 {
				t.Fatalf("pool get --json: %v (%+v), want the stored max attempts 4", err, settings)
			}
			if out := task(t, "pool", "pause", pool); out != "paused "+pool+"\n" {
				t.Fatalf("pool pause printed %q", out)
			}
			if out := task(t, "pick", pool); !strings.Contains(out, "no task available") {
				t.Fatalf("pick of a paused pool printed %q", out)
			}
			if out := task(t, "stats", pool); !strings.Contains(out, "paused=true") {
				t.Fatalf("stats of a paused pool printed %q", out)
			}
			task(t, "pool", "resume", pool)
			task(t, "put", pool, "doomed")
			if out := task(t, "cancel", pool, "doomed"); out != "cancelled "+pool+"/doomed\n" {
				t.Fatalf("cancel printed %q", out)
			}
			fails(t, "not_found", "cancel", pool, "doomed")
			fails(t, "settings.retry.jitter", "pool", "set", pool, "--retry-initial", "1s", "--retry-jitter", "2")
			fails(t, "settings.max_leased", "pool", "set", pool, "--max-leased", "2147483648")
			// A limit of one: a pick of two leases one, and the next pick none.
			fails(t, "settings.burst", "pool", "set", pool, "--burst", "3")
			if out := task(t, "pool", "set", pool, "--rate", "2.5", "--burst", "4"); !strings.Contains(out, "rate=2.5/s burst=4") {
				t.Fatalf("pool set --rate printed %q", out)
			}
			if out := task(t, "pool", "set", pool, "--max-leased", "1"); !strings.Contains(out, "max-leased=1") || !strings.Contains(out, "rate=none") {
				t.Fatalf("pool set --max-leased printed %q", out)
			}
			task(t, "put", pool, "l1")
			task(t, "put", pool, "l2")
			if out := task(t, "pick", pool, "--count", "2"); strings.Count(out, "token=") != 1 {
				t.Fatalf("pick of 2 in a pool limited to 1 printed %q", out)
			}
			if out := task(t, "pick", pool); !strings.Contains(out, "no task available") {
				t.Fatalf("pick at the limit printed %q", out)
			}
			fails(t, "wants POOL", "pool", "pause")

			// Bad input fails with the argument or field named, and exits non-zero.
			fails(t, "TOKEN:SECRET", "ack", pool, "a", "notanumber")
			fails(t, "TOKEN:SECRET", "ack", pool, "a", token) // a token without its secret
			fails(t, "wants POOL ID", "put", pool)
			fails(t, "--order", "pick", pool, "--order", "lifo")
			fails(t, "ttl", "pick", pool, "--ttl", "10ms")
			fails(t, "unknown command", "frobnicate", pool)
		})
	}
}
