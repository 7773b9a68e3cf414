package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/coordkit/coordkit/libs/server"
)

// held is one open Hold stream; its result arrives on done when it ends.
type held struct {
	cancel context.CancelFunc
	done   chan error
}

// hold opens a Hold stream with token and waits for its first message; it returns the
// stream, or the error that refused it.
func hold(t *testing.T, base, token string) (*held, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := connect.NewClient[emptypb.Empty, emptypb.Empty](h2cClient(), base+holdProc)
	req := connect.NewRequest(&emptypb.Empty{})
	req.Header().Set("Authorization", "Bearer "+token)
	s, err := c.CallServerStream(ctx, req)
	if err != nil {
		cancel()
		return nil, err
	}
	if !s.Receive() {
		cancel()
		return nil, s.Err()
	}
	h := &held{cancel: cancel, done: make(chan error, 1)}
	go func() {
		defer s.Close()
		for s.Receive() {
		}
		h.done <- s.Err()
	}()
	return h, nil
}

// metricLine returns the value text of a /metrics line starting with series, or "".
func metricLine(t *testing.T, base, series string) string {
	t.Helper()
	_, body := getStatus(t, http.DefaultClient, base+"/metrics")
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestStreamLimits: past the per-token limit a token's next stream is refused with
// resource_exhausted while other tokens still get theirs; past the instance limit every
// caller's is; a closed stream frees its place. The gauge and the refusal counter say so.
func TestStreamLimits(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "tokens", "alice "+aliceToken+"\nbob "+bobToken+"\n", 0o600)
	tokens, err := server.LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _, _ := edgeServer(t, server.Config{Tokens: tokens, MaxStreams: 5, MaxStreamsPerToken: 3}, 0)
	base := "http://" + addr
	var alice []*held
	for range 3 {
		h, err := hold(t, base, aliceToken)
		if err != nil {
			t.Fatalf("alice's stream %d: %v", len(alice)+1, err)
		}
		alice = append(alice, h)
	}
	_, err = hold(t, base, aliceToken)
	wantRefused(t, err, "per token")
	for i := range 2 {
		if _, err := hold(t, base, bobToken); err != nil {
			t.Fatalf("bob's stream %d, under both limits: %v", i+1, err)
		}
	}
	_, err = hold(t, base, bobToken)
	wantRefused(t, err, "on this instance")
	if got := metricLine(t, base, "coordkit_streams_open"); got != "5" {
		t.Errorf("coordkit_streams_open = %q, want 5", got)
	}
	for limit, want := range map[string]string{"token": "1", "instance": "1"} {
		if got := metricLine(t, base, `coordkit_streams_refused_total{limit="`+limit+`"}`); got != want {
			t.Errorf("refusals by the %s limit = %q, want %s", limit, got, want)
		}
	}
	alice[0].cancel()
	<-alice[0].done
	var h *held
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) { // the server sees the end a moment later
		if h, err = hold(t, base, aliceToken); err == nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("a closed stream did not free its place: %v", err)
		}
	}
	h.cancel()
}

func wantRefused(t *testing.T, err error, what string) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), what) {
		t.Fatalf("stream past the limit %s = %v, want resource_exhausted naming it", what, err)
	}
}

// TestStreamsOfRevokedToken: a reload that removes a token ends that token's open streams
// at once with unauthenticated; the streams of the tokens kept go on.
func TestStreamsOfRevokedToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "tokens", "alice "+aliceToken+"\nbob "+bobToken+"\n", 0o600)
	tokens, err := server.LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, addr, _, _ := edgeServer(t, server.Config{Tokens: tokens}, 0)
	base := "http://" + addr
	a1 := must(hold(t, base, aliceToken))(t)
	a2 := must(hold(t, base, aliceToken))(t)
	b := must(hold(t, base, bobToken))(t)
	writeFile(t, dir, "tokens", "bob "+bobToken+"\n", 0o600)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*held{a1, a2} {
		select {
		case err := <-h.done:
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Fatalf("revoked token's stream ended with %v, want unauthenticated", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stream of the removed token is still open 10s after the reload")
		}
	}
	select {
	case err := <-b.done:
		t.Fatalf("the kept token's stream ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if got := metricLine(t, base, "coordkit_streams_revoked_total"); got != "2" {
		t.Errorf("coordkit_streams_revoked_total = %q, want 2", got)
	}
}

func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// TestWaitingCallsOfRevokedToken: a reload that removes a token also ends that token's
// unary calls still in progress (a blocking Acquire or Pick may wait an hour, and would
// otherwise take a lock or a task after the token was removed) with unauthenticated; the
// calls of the tokens kept go on.
func TestWaitingCallsOfRevokedToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	all := "alice " + aliceToken + "\nbob " + bobToken + "\n"
	path := writeFile(t, dir, "tokens", all, 0o600)
	tokens, err := server.LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Tokens: tokens, Logger: slog.New(slog.DiscardHandler)})
	began := make(chan struct{}, 2)
	mux := http.NewServeMux()
	mux.Handle(sleepProc, connect.NewUnaryHandler(sleepProc,
		func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			began <- struct{}{}
			select {
			case <-time.After(time.Minute):
				return connect.NewResponse(&emptypb.Empty{}), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}, srv.HandlerOptions()...))
	srv.Handle(demoPath, mux)
	addr, _ := serveOn(t, srv)
	for _, tc := range []struct {
		name   string
		client *http.Client
	}{
		{"http1", http.DefaultClient},
		{"h2c", h2cClient()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := map[string]chan error{aliceToken: make(chan error, 1), bobToken: make(chan error, 1)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for token, done := range calls {
				c := connect.NewClient[emptypb.Empty, emptypb.Empty](tc.client, "http://"+addr+sleepProc)
				req := connect.NewRequest(&emptypb.Empty{})
				req.Header().Set("Authorization", "Bearer "+token)
				go func() {
					_, err := c.CallUnary(ctx, req)
					done <- err
				}()
			}
			for range calls {
				select {
				case <-began:
				case <-time.After(10 * time.Second):
					t.Fatal("the waiting calls never reached the handler")
				}
			}
			writeFile(t, dir, "tokens", "bob "+bobToken+"\n", 0o600)
			if err := srv.Reload(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				writeFile(t, dir, "tokens", all, 0o600)
				if err := srv.Reload(); err != nil {
					t.Error(err)
				}
			}()
			select {
			case err := <-calls[aliceToken]:
				if connect.CodeOf(err) != connect.CodeUnauthenticated {
					t.Fatalf("the removed token's waiting call ended with %v, want unauthenticated", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the removed token's waiting call still runs 10s after the reload")
			}
			select {
			case err := <-calls[bobToken]:
				t.Fatalf("the kept token's waiting call ended: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
		})
	}
}
