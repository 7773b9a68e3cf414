package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
)

const waitProcedure = "/demo.v1.DemoService/Wait"

// lockedBuffer collects the server's log lines for the test to read.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitServer serves one unary procedure that blocks until its request ends and then returns
// the bare ctx.Err(), as code that knows nothing of causes or Connect codes would: the edge
// must still give the client, the metrics and the log the same, right code. started receives
// once per call that reached the handler.
func waitServer(t *testing.T) (srv *server.Server, url string, stop func() error, logs *lockedBuffer, started chan struct{}) {
	t.Helper()
	logs = new(lockedBuffer)
	srv = server.New(server.Config{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	started = make(chan struct{}, 16)
	srv.Handle(waitProcedure, connect.NewUnaryHandler(waitProcedure,
		func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}, srv.HandlerOptions()...))
	url, stop = testenv.Serve(t, srv)
	return srv, url, stop, logs, started
}

// post sends an empty JSON Connect request to the wait procedure with the given headers and
// returns the Connect code from the response body.
func post(ctx context.Context, t *testing.T, url string, header map[string]string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+waitProcedure, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return string(body), err
}

// requests returns the coordkit_rpc_requests_total line for code, or "" when absent.
func requests(t *testing.T, url, code string) string {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	prefix := `coordkit_rpc_requests_total{code="` + code + `",procedure="` + waitProcedure + `"}`
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// eventually polls requests until the line for code appears, for outcomes the server
// records after the client has already gone.
func eventually(t *testing.T, url, code string) string {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if line := requests(t, url, code); line != "" {
			return line
		}
	}
	t.Fatalf("no coordkit_rpc_requests_total with code=%q", code)
	return ""
}

// noWarn fails when the server logged anything at warn or above.
func noWarn(t *testing.T, logs *lockedBuffer) {
	t.Helper()
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("logged above debug for a call that ended without a server fault: %s", line)
		}
	}
}

// TestZeroTimeoutCountedAsDeadline: Connect-Timeout-Ms: 0 is answered deadline_exceeded by
// connect-go before the handler runs; the metric must count the code the client got and the
// log must not warn about it.
func TestZeroTimeoutCountedAsDeadline(t *testing.T) {
	t.Parallel()
	_, url, _, logs, _ := waitServer(t)
	body, err := post(context.Background(), t, url, map[string]string{"Connect-Timeout-Ms": "0"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, `"code":"deadline_exceeded"`) {
		t.Fatalf("response = %s, want deadline_exceeded", body)
	}
	if got := requests(t, url, "deadline_exceeded"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("deadline_exceeded counted as %q, want 1", got)
	}
	if got := requests(t, url, "unknown"); got != "" {
		t.Fatalf("counted %q for a call the client saw as deadline_exceeded", got)
	}
	if !strings.Contains(logs.String(), "code=deadline_exceeded") {
		t.Fatalf("no debug line for the expired call; logs:\n%s", logs)
	}
	noWarn(t, logs)
}

// TestCanceledCallCounted: a caller that cancels is counted canceled, logged at debug.
func TestCanceledCallCounted(t *testing.T) {
	t.Parallel()
	_, url, _, logs, started := waitServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := post(ctx, t, url, nil)
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("call never reached the handler")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error = %v, want its own cancel", err)
	}
	eventually(t, url, "canceled")
	for _, code := range []string{"unknown", "internal", "unavailable"} {
		if got := requests(t, url, code); got != "" {
			t.Fatalf("a canceled call was counted as %q", got)
		}
	}
	noWarn(t, logs)
}

// TestShutdownCountedUnavailable: a call the server's shutdown ends reaches the client as
// unavailable (retry elsewhere), even when the handler returned the bare ctx.Err(), and is
// counted as such, without a warning per waiting call.
func TestShutdownCountedUnavailable(t *testing.T) {
	t.Parallel()
	srv, url, stop, logs, started := waitServer(t)
	c := connect.NewClient[emptypb.Empty, emptypb.Empty](http.DefaultClient, url+waitProcedure, connect.WithProtoJSON())
	errc := make(chan error, 1)
	go func() {
		_, err := c.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{}))
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("call never reached the handler")
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-errc; connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("call ended by shutdown = %v, want unavailable", err)
	}
	// /metrics went down with the server; read the same registry directly.
	families, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var counted []string
	for _, f := range families {
		if f.GetName() != "coordkit_rpc_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" {
					counted = append(counted, l.GetValue())
				}
			}
		}
	}
	if len(counted) != 1 || counted[0] != "unavailable" {
		t.Fatalf("call ended by shutdown counted with codes %v, want [unavailable]", counted)
	}
	if !strings.Contains(logs.String(), "code=unavailable") {
		t.Fatalf("no debug line for the call ended by shutdown; logs:\n%s", logs)
	}
	noWarn(t, logs)
}
