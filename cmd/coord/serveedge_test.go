package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"

	"github.com/coordkit/coordkit/libs/testenv"
)

// serveEdge runs `coord serve` on 127.0.0.1:0 with args, logging at info, and returns its
// base URL, read from the startup line (which must resolve the port), and its log.
func serveEdge(t *testing.T, dataDir string, args ...string) (string, *lockedBuffer) {
	t.Helper()
	log := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir, "--log-level", "info"}, args...), io.Discard, log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v after shutdown, want nil", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not shut down")
		}
	})
	urlRE := regexp.MustCompile(`msg=serving .*url=(https?://127\.0\.0\.1:[1-9][0-9]*)`)
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, log)
		default:
		}
		if m := urlRE.FindStringSubmatch(log.String()); m != nil {
			return m[1], log
		}
	}
	t.Fatalf("no serving line with a resolved port:\n%s", log)
	return "", nil
}

func TestServeStartupLine(t *testing.T) {
	t.Parallel()
	url, log := serveEdge(t, t.TempDir())
	out := log.String()
	if n := strings.Count(out, "msg=serving"); n != 1 {
		t.Fatalf("%d serving lines, want 1:\n%s", n, out)
	}
	var line string
	for l := range strings.SplitSeq(out, "\n") {
		if strings.Contains(l, "msg=serving") {
			line = l
		}
	}
	for _, want := range []string{
		"url=" + url, "auth=none", "lock.lock_backends=sqlite", "lock.default=sqlite",
		"idgen.id_store=sqlite", "taskpick.task_backends=sqlite",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("serving line lacks %q:\n%s", want, line)
		}
	}
	if strings.Contains(out, "msg=service ") {
		t.Errorf("a line per service besides the serving line:\n%s", out)
	}
	if code := getCode(t, http.DefaultClient, url+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", code)
	}
}

// TestServeBusyPort checks that a taken --addr fails at once, naming the flag, before any
// backend is touched: no snowflake worker id is leased.
func TestServeBusyPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	// A first run creates the lease table, so that the check below is not vacuous.
	prepared, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	firstLog := &lockedBuffer{}
	go func() {
		done <- run(prepared, []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--log-level", "info"}, io.Discard, firstLog)
	}()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "idgen.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	leases := func() (int, error) { // worker ids held now
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM coordkit_idgen_workers WHERE owner <> ''").Scan(&n)
		return n, err
	}
	fingerprint := func() (int64, error) { // changes with every lease taken, renewed or released
		var sum int64
		err := db.QueryRow("SELECT COALESCE(SUM(expires_at + last_ms), 0) FROM coordkit_idgen_workers").Scan(&sum)
		return sum, err
	}
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if n, err := leases(); err == nil && n == 1 && strings.Contains(firstLog.String(), "msg=serving") {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("the first serve leased no worker id")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("first serve: %v", err)
	}
	if n, err := leases(); err != nil || n != 0 {
		t.Fatalf("after a clean shutdown: %d leases (%v), want 0", n, err)
	}

	before, err := fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = run(context.Background(), []string{"serve", "--addr", ln.Addr().String(), "--data-dir", dir}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--addr "+ln.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve on a busy port = %v, want an error naming --addr and the address in use", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("serve on a busy port took %v to fail", d)
	}
	if n, err := leases(); err != nil || n != 0 {
		t.Fatalf("serve on a busy port left %d worker leases (%v), want 0", n, err)
	}
	if after, err := fingerprint(); err != nil || after != before {
		t.Fatalf("serve on a busy port changed the lease table (%d -> %d, %v): it leased a worker id", before, after, err)
	}
}

func getCode(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	res.Body.Close()
	return res.StatusCode
}

// bearer sets the Authorization header on every request of a Connect client.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if b != "" {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if b != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		}
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// lockClient is a raw lock client sending token (none when empty).
func lockClient(url, token string) lockv1connect.LockServiceClient {
	return lockv1connect.NewLockServiceClient(http.DefaultClient, url, connect.WithInterceptors(bearer(token)))
}

// acquireCode tries to acquire key with the token and returns the call's code (0 for ok).
func acquireCode(url, token, key string) connect.Code {
	_, err := lockClient(url, token).Acquire(context.Background(), &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Second)})
	if err != nil {
		return connect.CodeOf(err)
	}
	return 0
}

// watchCode opens a Watch of key with the token and returns the code of its first receive.
func watchCode(url, token, key string) connect.Code {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := lockClient(url, token).Watch(ctx, &lockv1.WatchRequest{Key: key})
	if err != nil {
		return connect.CodeOf(err)
	}
	defer s.Close()
	if !s.Receive() {
		return connect.CodeOf(s.Err())
	}
	return 0
}

func TestServeAuthTokensReload(t *testing.T) {
	const alice, bob = "alice-0123456789abcdef", "bob-0123456789abcdefgh"
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# team tokens\nalice "+alice+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, log := serveEdge(t, t.TempDir(), "--auth-tokens-file", tokens)
	key := "auth:" + testenv.Prefix(t)
	tests := []struct {
		name, token string
		want        connect.Code
	}{
		{name: "good", token: alice},
		{name: "missing", want: connect.CodeUnauthenticated},
		{name: "unknown", token: bob, want: connect.CodeUnauthenticated},
	}
	for _, tt := range tests {
		if got := acquireCode(url, tt.token, key+":"+tt.name); got != tt.want {
			t.Errorf("%s token: Acquire = %v, want %v", tt.name, got, tt.want)
		}
		if got := watchCode(url, tt.token, key); got != tt.want {
			t.Errorf("%s token: Watch = %v, want %v", tt.name, got, tt.want)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code := getCode(t, http.DefaultClient, url+path); code != http.StatusOK {
			t.Errorf("GET %s without a token = %d, want 200", path, code)
		}
	}
	if !strings.Contains(log.String(), "tokens=1") {
		t.Errorf("serving line lacks tokens=1:\n%s", log)
	}

	// Alice's Watch, open across the reload, must end with it.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	watch, err := lockClient(url, alice).Watch(wctx, &lockv1.WatchRequest{Key: key})
	if err != nil || !watch.Receive() {
		t.Fatalf("alice's Watch before the reload: %v, %v", err, watch.Err())
	}
	watchEnded := make(chan error, 1)
	go func() {
		defer watch.Close()
		for watch.Receive() {
		}
		watchEnded <- watch.Err()
	}()

	// SIGHUP: Bob in, Alice out, without a restart.
	if err := os.WriteFile(tokens, []byte("bob "+bob+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-watchEnded:
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("the removed token's Watch ended with %v, want unauthenticated", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the removed token's Watch is still open 10s after SIGHUP")
	}
	for start := time.Now(); acquireCode(url, bob, key+":bob") != 0; time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the token added before SIGHUP is still refused:\n%s", log)
		}
	}
	if got := acquireCode(url, alice, key+":alice2"); got != connect.CodeUnauthenticated {
		t.Errorf("token removed before SIGHUP: Acquire = %v, want unauthenticated", got)
	}
	// A bad file on SIGHUP keeps the tokens in force and logs an error.
	if err := os.WriteFile(tokens, []byte("carol short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); !strings.Contains(log.String(), "reload on SIGHUP failed"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no error logged for a bad tokens file on SIGHUP:\n%s", log)
		}
	}
	if got := acquireCode(url, bob, key+":bob2"); got != 0 {
		t.Errorf("after a failed reload the tokens in force = %v, want ok", got)
	}
	out := log.String()
	for _, secret := range []string{alice, bob} {
		if strings.Contains(out, secret) {
			t.Fatalf("log shows a token:\n%s", out)
		}
	}
	for _, want := range []string{"caller=missing", "caller=unknown"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestServeAuthTokensFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("alice tooshort\n"), 0o600) //nolint:errcheck // checked by the run
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "short token", args: []string{"--auth-tokens-file", short}, want: "at least 16"},
		{name: "missing tokens file", args: []string{"--auth-tokens-file", filepath.Join(dir, "none")}, want: "--auth-tokens-file"},
		{name: "cert without key", args: []string{"--tls-cert", short}, want: "--tls-cert"},
		{name: "bad cert", args: []string{"--tls-cert", short, "--tls-key", short}, want: "--tls-cert"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(context.Background(), append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, tt.args...), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("serve = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestServeTLS(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	url, _ := serveEdge(t, t.TempDir(), "--tls-cert", certs.CertFile, "--tls-key", certs.KeyFile)
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("serving line url %s, want https", url)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: certs.ClientConfig(), ForceAttemptHTTP2: true}}
	res, err := c.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
		t.Fatalf("/readyz over TLS = %d HTTP/%d, want 200 over HTTP/2", res.StatusCode, res.ProtoMajor)
	}
}

// readyz returns /readyz's status and its services' backends.
func readyz(t *testing.T, url string) (int, map[string]map[string]string) {
	t.Helper()
	res, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct{ Services map[string]map[string]string }
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, body.Services
}

// grpcHealth is the gRPC health status of service, through `coord health`'s own code path
// being someone else's, asked in Connect's JSON.
func grpcHealth(t *testing.T, url, service string) string {
	t.Helper()
	res, err := http.Post(url+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader(`{"service":"`+service+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Status string }
	json.NewDecoder(res.Body).Decode(&out) //nolint:errcheck // an empty status fails the caller
	return out.Status
}

// TestServeHealthFollowsBackend stops a private Redis under a running server: /readyz and
// gRPC health turn NOT_SERVING for the services on it, and SERVING again when it is back.
func TestServeHealthFollowsBackend(t *testing.T) {
	t.Parallel()
	rds := testenv.StartRedis(t)
	url, _ := serveEdge(t, t.TempDir(), "--redis-addr", rds.Addr())
	const lockSvc = "coordkit.lock.v1.LockService"
	if code, s := readyz(t, url); code != 200 || s["lock"]["redis"] != "ok" || s["taskpick"]["redis"] != "ok" {
		t.Fatalf("/readyz = %d %v, want 200 with lock's and taskpick's redis ok", code, s)
	}
	if st := grpcHealth(t, url, lockSvc); st != "SERVING_STATUS_SERVING" {
		t.Fatalf("lock health = %s, want SERVING", st)
	}

	rds.Stop()
	waitFor(t, "NOT_SERVING after Redis stopped", func() bool {
		return grpcHealth(t, url, lockSvc) == "SERVING_STATUS_NOT_SERVING"
	})
	code, s := readyz(t, url)
	if code != http.StatusServiceUnavailable || s["lock"]["redis"] == "ok" || s["lock"]["sqlite"] != "ok" || s["idgen"]["snowflake"] != "ok" {
		t.Fatalf("/readyz with Redis down = %d %v, want 503 naming lock's redis only among lock's backends", code, s)
	}
	if st := grpcHealth(t, url, ""); st != "SERVING_STATUS_NOT_SERVING" {
		t.Errorf("whole-server health with Redis down = %s, want NOT_SERVING", st)
	}
	if code := getCode(t, http.DefaultClient, url+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with Redis down = %d, want 200", code)
	}

	rds.Start()
	waitFor(t, "SERVING after Redis came back", func() bool {
		return grpcHealth(t, url, "") == "SERVING_STATUS_SERVING"
	})
	if code, _ := readyz(t, url); code != http.StatusOK {
		t.Errorf("/readyz after Redis came back = %d, want 200", code)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("not %s within 15s", what)
		}
	}
}

// TestServeSlowBodiesSpareLongCalls opens many connections whose body never comes against a
// server with a 1s body timeout: they are closed within it, and meanwhile an Acquire that
// waits 3s for a lock and a Watch that streams for as long still work.
func TestServeSlowBodiesSpareLongCalls(t *testing.T) {
	t.Parallel()
	url, _ := serveEdge(t, t.TempDir(), "--body-timeout", "1s")
	addr := strings.TrimPrefix(url, "http://")
	key := "slow:" + testenv.Prefix(t)
	lc := lockClient(url, "")
	ctx := context.Background()

	const slowConns = 200
	conns := make([]net.Conn, slowConns)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /coordkit.lock.v1.LockService/Acquire HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n", addr)
		conns[i] = c
	}

	first, err := lc.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(3 * time.Second)})
	if err != nil || !first.GetAcquired() {
		t.Fatalf("first Acquire = %v, %v", first, err)
	}
	watch, err := lc.Watch(ctx, &lockv1.WatchRequest{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	events := make(chan string, 16)
	go func() {
		for watch.Receive() {
			events <- watch.Msg().GetEvent().GetKind().String()
		}
		close(events)
	}()
	start := time.Now()
	second, err := lc.Acquire(ctx, &lockv1.AcquireRequest{
		Key: key, Ttl: durationpb.New(time.Minute), Wait: durationpb.New(30 * time.Second),
	})
	waited := time.Since(start)
	if err != nil || !second.GetAcquired() {
		t.Fatalf("Acquire waiting up to 30s = %v, %v; want acquired when the first lease expires", second, err)
	}
	if waited < 1500*time.Millisecond {
		t.Fatalf("the waiting Acquire returned after %v, before the first lease (3s) could expire", waited)
	}
	t.Logf("waiting Acquire got the lock after %v (body timeout 1s)", waited.Round(time.Millisecond))
	// The Watch, open since before the wait, still streams: it sees the second acquire.
	timeout := time.After(10 * time.Second)
	for seen := false; !seen; {
		select {
		case kind, ok := <-events:
			if !ok {
				t.Fatalf("Watch ended: %v", watch.Err())
			}
			seen = kind == lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED.String() && time.Since(start) > time.Second
		case <-timeout:
			t.Fatal("Watch saw no acquire after the wait")
		}
	}
	// Every slow connection was closed by the server.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(2 * time.Second)) //nolint:errcheck // a failed deadline fails the read
		_, err := io.Copy(io.Discard, bufio.NewReader(c))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("slow connection %d still open %v after its headers (body timeout 1s)", i, time.Since(start))
		}
	}
}

// TestServeStreamLimitFlags: --max-streams-per-token and --max-streams (here from its
// COORDKIT_ variable) reach the server: past them a Watch is refused with resource_exhausted.
func TestServeStreamLimitFlags(t *testing.T) {
	const alice, bob, carol = "alice-0123456789abcdef", "bob-0123456789abcdefgh", "carol-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("alice "+alice+"\nbob "+bob+"\ncarol "+carol+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COORDKIT_MAX_STREAMS", "2")
	url, _ := serveEdge(t, t.TempDir(), "--auth-tokens-file", tokens, "--max-streams-per-token", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := "streams:" + testenv.Prefix(t)
	open := func(token string) error {
		s, err := lockClient(url, token).Watch(ctx, &lockv1.WatchRequest{Key: key})
		if err != nil {
			return err
		}
		t.Cleanup(func() { s.Close() })
		if !s.Receive() {
			return s.Err()
		}
		return nil
	}
	if err := open(alice); err != nil {
		t.Fatalf("alice's first Watch: %v", err)
	}
	if err := open(alice); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("alice's second Watch with --max-streams-per-token 1 = %v, want resource_exhausted", err)
	}
	if err := open(bob); err != nil {
		t.Fatalf("bob's first Watch: %v", err)
	}
	if err := open(""); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a Watch without a token = %v, want unauthenticated", err)
	}
	if err := open(alice + "x"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a Watch with an unknown token = %v, want unauthenticated", err)
	}
	if err := open(carol); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "instance") {
		t.Fatalf("a third Watch, carol's first, with COORDKIT_MAX_STREAMS=2 = %v, want resource_exhausted naming the instance", err)
	}
}
