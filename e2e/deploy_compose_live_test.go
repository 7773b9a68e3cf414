package e2e

// The compose stack's coord settings run for real: two coord processes get coord-1's
// COORDKIT_* environment with the addresses swapped for the loopback dev backends.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/coordkit/coordkit/libs/testenv"
)

// composeDevEnv is the environment of coord service s of stack p as its container gets it
// (the image's ENV, then compose's), with every engine address pointed at the same engine of
// deploy/dev/backends.sh and everything else kept: backends, defaults, lease store, log
// format. --addr and --data-dir are left to the harness.
func composeDevEnv(t testing.TB, s types.ServiceConfig) []string {
	t.Helper()
	env := composeCoordEnv(t, s)
	delete(env, coordkitEnvPrefix+"ADDR")
	delete(env, coordkitEnvPrefix+"DATA_DIR")
	devList := func(setting string, dev []string) {
		if n := len(splitAddrList(env[setting])); n > len(dev) {
			t.Fatalf("%s lists %d servers; the dev backends have %d", setting, n, len(dev))
		} else if n > 0 {
			env[setting] = strings.Join(dev[:n], ",")
		}
	}
	if v := env[coordkitEnvPrefix+"REDIS_URL"]; v != "" {
		u, err := url.Parse(v)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = testenv.RedisAddr()
		env[coordkitEnvPrefix+"REDIS_URL"] = u.String()
	}
	if env[coordkitEnvPrefix+"REDIS_ADDR"] != "" {
		env[coordkitEnvPrefix+"REDIS_ADDR"] = testenv.RedisAddr()
	}
	devList(coordkitEnvPrefix+"REDLOCK_ADDRS", testenv.RedlockAddrs())
	devList(coordkitEnvPrefix+"ZK_ADDRS", testenv.ZooKeeperAddrs())
	devList(coordkitEnvPrefix+"NATS_URL", []string{testenv.NATSURL()})
	if env[coordkitEnvPrefix+"MYSQL_DSN"] != "" {
		env[coordkitEnvPrefix+"MYSQL_DSN"] = testenv.MySQLDSN() // the dev database's user and password
	}
	if env[coordkitEnvPrefix+"POSTGRES_URL"] != "" {
		env[coordkitEnvPrefix+"POSTGRES_URL"] = testenv.PostgresURL()
		// A schema of the test's own: the dev database is shared.
		env[coordkitEnvPrefix+"POSTGRES_SCHEMA"] = testenv.PostgresSchema(t)
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// composePost sends one Connect JSON request, as the docs' curl examples do, and decodes the
// answer into resp.
func composePost(t testing.TB, base, procedure string, req, resp any) {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, base+procedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s %s (%v)", procedure, body, res.Status, b, err)
	}
	if err := json.Unmarshal(b, resp); err != nil {
		t.Fatalf("%s: %v: %s", procedure, err, b)
	}
}

// TestComposeCoordEnvServes runs the full stack's coord settings for real, without Docker:
// two instances get coord-1's environment with each compose address pointed at the same
// engine on loopback (composeDevEnv). Both must become ready (every backend accepted these
// settings), hand the same lock out once through the default backend (Redis), release it
// through the other instance, and issue snowflake IDs under different worker ids (leases in
// the shared MySQL, not in each instance's SQLite).
func TestComposeCoordEnvServes(t *testing.T) {
	t.Parallel()
	p := composeLoad(t, composeFullStack, nil)
	env := composeDevEnv(t, p.Services["coord-1"])
	a, b := startInstanceEnv(t, "coord-1", env), startInstanceEnv(t, "coord-2", env)

	// The fields of Acquire's and Release's JSON answers this test reads.
	type lease struct {
		Backend, FencingToken string
		Held                  bool
	}
	type answer struct {
		Acquired, Released bool
		Lease, Holder      lease
	}
	var got answer
	key := "e2e:compose:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	owner := "0123456789abcdef-" + key
	composePost(t, a.URL(), "/coordkit.lock.v1.LockService/Acquire", map[string]any{"key": key, "owner": owner, "ttl": "30s"}, &got)
	want := composeEnv(p.Services["coord-1"])[coordkitEnvPrefix+"DEFAULT_BACKEND"]
	if !got.Acquired || (want != "" && got.Lease.Backend != want) {
		t.Fatalf("Acquire on coord-1: %+v, want acquired on the default backend %q", got, want)
	}
	token := got.Lease.FencingToken
	got = answer{}
	composePost(t, b.URL(), "/coordkit.lock.v1.LockService/Acquire", map[string]any{"key": key}, &got)
	if got.Acquired || !got.Holder.Held || got.Holder.FencingToken != token {
		t.Fatalf("Acquire on coord-2 of a key coord-1 holds: %+v, want not acquired, held with token %s", got, token)
	}
	composePost(t, b.URL(), "/coordkit.lock.v1.LockService/Release", map[string]any{"key": key, "owner": owner}, &got)
	if !got.Released {
		t.Fatalf("Release through coord-2 of coord-1's lease: %+v, want released", got)
	}

	workers := map[int]string{}
	for _, in := range []*instance{a, b} {
		var next struct{ IDs []string }
		composePost(t, in.URL(), "/coordkit.idgen.v1.IdService/Next", map[string]any{"mode": "MODE_SNOWFLAKE", "count": 1}, &next)
		if len(next.IDs) != 1 {
			t.Fatalf("Next on %s: %+v", in.name, next)
		}
		var dec struct{ WorkerID int }
		composePost(t, in.URL(), "/coordkit.idgen.v1.IdService/Decode", map[string]any{"id": next.IDs[0]}, &dec)
		if other, ok := workers[dec.WorkerID]; ok {
			t.Errorf("%s and %s both issue snowflake IDs as worker %d: their IDs can collide", other, in.name, dec.WorkerID)
		}
		workers[dec.WorkerID] = in.name
	}
}
