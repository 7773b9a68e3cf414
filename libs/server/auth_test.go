package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/coordkit/coordkit/libs/server"
)

const (
	aliceToken = "alice-secret-0123456789"
	bobToken   = "bob-secret-abcdefghijkl"
)

func TestLoadTokensErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content, want string
	}{
		{name: "short token", content: "alice short\n", want: "at least 16"},
		{name: "columns swapped", content: aliceToken + " alice\n", want: "at least 16"},
		{name: "three fields", content: "alice " + aliceToken + " extra\n", want: "want `name token`"},
		{name: "one field", content: aliceToken + "\n", want: "want `name token`"},
		{name: "duplicate name", content: "alice " + aliceToken + "\nalice " + bobToken + "\n", want: `name "alice" already on line 1`},
		{name: "duplicate token", content: "alice " + aliceToken + "\nbob " + aliceToken + "\n", want: "same token as line 1"},
		{name: "no token", content: "# only a comment\n\n", want: "holds no token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, t.TempDir(), "tokens", tt.content, 0o600)
			_, err := server.LoadTokens(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadTokens = %v, want an error containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), aliceToken) || strings.Contains(err.Error(), bobToken) {
				t.Fatalf("error shows a token: %v", err)
			}
		})
	}
	_, err := server.LoadTokens(t.TempDir()+"/missing", nil)
	if err == nil {
		t.Fatal("LoadTokens of a missing file succeeded")
	}
}

func TestLoadTokensWarnsWorldReadable(t *testing.T) {
	t.Parallel()
	logs := new(lockedBuffer)
	path := writeFile(t, t.TempDir(), "tokens", "# ci jobs\n\nalice "+aliceToken+"\n\tbob\t"+bobToken+"  \n", 0o644)
	tokens, err := server.LoadTokens(path, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if tokens.Len() != 2 {
		t.Fatalf("loaded %d tokens, want 2", tokens.Len())
	}
	if !strings.Contains(logs.String(), "readable by every user") {
		t.Fatalf("no warning about a world-readable file; logs:\n%s", logs)
	}
	for _, tok := range []string{aliceToken, bobToken} {
		if name, ok := tokens.Lookup(tok); !ok || name == "" {
			t.Fatalf("Lookup of a loaded token = %q, %v", name, ok)
		}
	}
	if _, ok := tokens.Lookup(aliceToken + "x"); ok {
		t.Fatal("Lookup accepted a token with a byte appended")
	}
}

// call makes one unary call to proc with the token (none when empty) and returns its code.
func call(t *testing.T, client *http.Client, base, proc, token string) connect.Code {
	t.Helper()
	c := connect.NewClient[emptypb.Empty, emptypb.Empty](client, base+proc)
	req := connect.NewRequest(&emptypb.Empty{})
	if token != "" {
		req.Header().Set("Authorization", "Bearer "+token)
	}
	_, err := c.CallUnary(context.Background(), req)
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// stream opens the demo server stream with the token and returns how many messages came and
// the stream's code.
func stream(t *testing.T, client *http.Client, base, token string, opts ...connect.ClientOption) (int, connect.Code) {
	t.Helper()
	c := connect.NewClient[emptypb.Empty, emptypb.Empty](client, base+streamProc, opts...)
	req := connect.NewRequest(&emptypb.Empty{})
	if token != "" {
		req.Header().Set("Authorization", "Bearer "+token)
	}
	s, err := c.CallServerStream(context.Background(), req)
	if err != nil {
		return 0, connect.CodeOf(err)
	}
	defer s.Close()
	n := 0
	for s.Receive() {
		n++
	}
	if err := s.Err(); err != nil {
		return n, connect.CodeOf(err)
	}
	return n, 0
}

func TestAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "tokens", "alice "+aliceToken+"\n", 0o600)
	tokens, err := server.LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _, logs := edgeServer(t, server.Config{Tokens: tokens}, 0)
	base := "http://" + addr
	h1, h2c := http.DefaultClient, h2cClient()

	t.Run("rpcs", func(t *testing.T) {
		tests := []struct {
			name  string
			token string
			want  connect.Code
		}{
			{name: "good token", token: aliceToken},
			{name: "missing token", want: connect.CodeUnauthenticated},
			{name: "unknown token", token: bobToken, want: connect.CodeUnauthenticated},
			{name: "token prefix", token: aliceToken[:16], want: connect.CodeUnauthenticated},
		}
		for _, tt := range tests {
			if got := call(t, h1, base, unaryProc, tt.token); got != tt.want {
				t.Errorf("%s: unary over HTTP/1.1 = %v, want %v", tt.name, got, tt.want)
			}
			if got := call(t, h2c, base, unaryProc, tt.token); got != tt.want {
				t.Errorf("%s: unary over h2c = %v, want %v", tt.name, got, tt.want)
			}
			n, got := stream(t, h2c, base, tt.token, connect.WithGRPC())
			if got != tt.want || (tt.want == 0 && n != streamReplies) {
				t.Errorf("%s: gRPC server stream = %d messages, %v; want %d, %v", tt.name, n, got, streamReplies, tt.want)
			}
			n, got = stream(t, h1, base, tt.token)
			if got != tt.want || (tt.want == 0 && n != streamReplies) {
				t.Errorf("%s: Connect server stream = %d messages, %v; want %d, %v", tt.name, n, got, streamReplies, tt.want)
			}
		}
	})

	t.Run("refusals counted", func(t *testing.T) {
		_, body := getStatus(t, h1, base+"/metrics")
		if !strings.Contains(body, `code="unauthenticated"`) {
			t.Errorf("/metrics counts no unauthenticated call after refusals:\n%.2000s", body)
		}
	})

	t.Run("exempt", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			if code, body := getStatus(t, h1, base+path); code != http.StatusOK {
				t.Errorf("GET %s without a token = %d %s, want 200", path, code, body)
			}
		}
		res, err := h1.Post(base+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(body), "SERVING_STATUS_SERVING") {
			t.Errorf("gRPC health without a token = %d %s, want SERVING", res.StatusCode, body)
		}
		// Reflection describes the whole API: it needs a token like every other RPC.
		rs := grpcreflect.NewClient(h2c, base, connect.WithGRPC()).NewStream(context.Background())
		_, err = rs.ListServices()
		rs.Close()
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("reflection without a token = %v, want unauthenticated", err)
		}
	})

	t.Run("logs", func(t *testing.T) {
		if got := call(t, h1, base, failProc, aliceToken); got != connect.CodeInternal {
			t.Fatalf("failing procedure = %v, want internal", got)
		}
		out := logs.String()
		for _, want := range []string{"caller=alice", "caller=missing", "caller=unknown"} {
			if !strings.Contains(out, want) {
				t.Errorf("logs lack %q:\n%s", want, out)
			}
		}
		for _, secret := range []string{aliceToken, bobToken, aliceToken[:16]} {
			if strings.Contains(out, secret) {
				t.Errorf("logs show a token %q:\n%s", secret, out)
			}
		}
	})

	t.Run("reload", func(t *testing.T) {
		// Bob in, Alice out, without a restart.
		writeFile(t, dir, "tokens", "bob "+bobToken+"\n", 0o600)
		if err := tokens.Reload(); err != nil {
			t.Fatal(err)
		}
		if got := call(t, h1, base, unaryProc, bobToken); got != 0 {
			t.Errorf("added token after reload = %v, want ok", got)
		}
		if got := call(t, h1, base, unaryProc, aliceToken); got != connect.CodeUnauthenticated {
			t.Errorf("removed token after reload = %v, want unauthenticated", got)
		}
		// A bad file keeps the tokens in force.
		writeFile(t, dir, "tokens", "carol short\n", 0o600)
		if err := tokens.Reload(); err == nil {
			t.Fatal("reload of a bad file succeeded")
		}
		if got := call(t, h1, base, unaryProc, bobToken); got != 0 {
			t.Errorf("token in force after a failed reload = %v, want ok", got)
		}
	})
}

// TestAuthHeaderForms: the scheme is case-insensitive (RFC 9110 section 11.1) and may be
// followed by any spaces or tabs; anything but a Bearer credential is refused.
func TestAuthHeaderForms(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "tokens", "alice "+aliceToken+"\n", 0o600)
	tokens, err := server.LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _, _ := edgeServer(t, server.Config{Tokens: tokens}, 0)
	c := connect.NewClient[emptypb.Empty, emptypb.Empty](http.DefaultClient, "http://"+addr+unaryProc)
	tests := []struct {
		header string
		want   connect.Code
	}{
		{header: "Bearer " + aliceToken},
		{header: "bearer " + aliceToken},
		{header: "BEARER " + aliceToken},
		{header: "Bearer\t" + aliceToken},
		{header: "Bearer   " + aliceToken + "  "},
		{header: "Basic " + aliceToken, want: connect.CodeUnauthenticated},
		{header: "Bearer" + aliceToken, want: connect.CodeUnauthenticated},
		{header: "Bearer", want: connect.CodeUnauthenticated},
		{header: "Bearer  ", want: connect.CodeUnauthenticated},
		{header: aliceToken, want: connect.CodeUnauthenticated},
		{header: "Bearer " + aliceToken + " x", want: connect.CodeUnauthenticated},
	}
	for _, tt := range tests {
		req := connect.NewRequest(&emptypb.Empty{})
		req.Header().Set("Authorization", tt.header)
		_, err := c.CallUnary(context.Background(), req)
		if got := connect.CodeOf(err); err == nil && tt.want != 0 || err != nil && got != tt.want {
			t.Errorf("Authorization %q = %v, want code %v", tt.header, err, tt.want)
		}
	}
}

// TestLoadTokensEncodings: a file saved by a Windows editor (CRLF line ends, a byte order
// mark) loads with the names as written.
func TestLoadTokensEncodings(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, content string }{
		{name: "crlf", content: "# ci\r\nalice " + aliceToken + "\r\nbob\t" + bobToken + "\r\n"},
		{name: "bom then comment", content: "\uFEFF# ci\nalice " + aliceToken + "\nbob " + bobToken + "\n"},
		{name: "bom then token", content: "\uFEFFalice " + aliceToken + "\r\nbob " + bobToken + "\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, t.TempDir(), "tokens", tt.content, 0o600)
			tokens, err := server.LoadTokens(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			for tok, want := range map[string]string{aliceToken: "alice", bobToken: "bob"} {
				if name, ok := tokens.Lookup(tok); !ok || name != want {
					t.Errorf("Lookup = %q, %v; want %q", name, ok, want)
				}
			}
		})
	}
}
