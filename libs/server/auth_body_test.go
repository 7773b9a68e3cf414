package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/server"
)

// stalledBody is a request body that gives its first chunk, counting what was read, and then
// never ends (until the test closes it).
type stalledBody struct {
	first []byte
	read  atomic.Int64
	done  chan struct{}
}

func newStalledBody(first string) *stalledBody {
	return &stalledBody{first: []byte(first), done: make(chan struct{})}
}

// Read implements io.Reader.
func (b *stalledBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		b.read.Add(int64(n))
		return n, nil
	}
	<-b.done
	return 0, io.EOF
}

// TestAuthBeforeBody: a request without a valid token is refused on its headers, in its own
// protocol, before its body is read: one whose body never ends still gets unauthenticated at
// once (not after the body timeout), over HTTP/1.1 and HTTP/2, for Connect and gRPC clients.
// A good token's request is read and served as before.
func TestAuthBeforeBody(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "tokens", "alice "+aliceToken+"\n", 0o600)
	tokens, err := server.LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A body timeout far past the test's patience: a refusal that waits for the body fails.
	_, addr, _, _ := edgeServer(t, server.Config{Tokens: tokens, BodyTimeout: time.Minute}, 0)
	base := "http://" + addr
	for _, tt := range []struct {
		name        string
		client      *http.Client
		contentType string
		proc        string
		token       string
	}{
		{"connect unary over HTTP/1.1, no token", http.DefaultClient, "application/json", unaryProc, ""},
		{"connect unary over h2c, unknown token", h2cClient(), "application/json", unaryProc, bobToken},
		{"connect stream over h2c, no token", h2cClient(), "application/connect+json", streamProc, ""},
		{"gRPC over h2c, no token", h2cClient(), "application/grpc", unaryProc, ""},
		{"unknown procedure over h2c, no token", h2cClient(), "application/json", demoPath + "Nope", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := newStalledBody(`{"padding":"` + strings.Repeat("x", 4096))
			var once sync.Once
			end := func() { once.Do(func() { close(body.done) }) }
			defer end()
			req, err := http.NewRequest(http.MethodPost, base+tt.proc, body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = 900 << 10 // announced, never sent
			req.Header.Set("Content-Type", tt.contentType)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			start := time.Now()
			type result struct {
				res *http.Response
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := tt.client.Do(req)
				done <- result{res, err}
			}()
			var res *http.Response
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatalf("request: %v", r.err)
				}
				res = r.res
			case <-time.After(10 * time.Second):
				t.Fatal("no answer within 10s to an unauthenticated request whose body never ends: the server waits for the body")
			}
			defer res.Body.Close()
			defer end() // first: an HTTP/2 response body's Close waits for the request body's end
			data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
			t.Logf("refused in %v, %d body bytes sent", time.Since(start).Round(time.Millisecond), body.read.Load())
			switch {
			case strings.HasPrefix(tt.contentType, "application/grpc"):
				status := res.Header.Get("Grpc-Status") + res.Trailer.Get("Grpc-Status")
				if status != "16" { // UNAUTHENTICATED
					t.Fatalf("gRPC refusal: HTTP %d, grpc-status %q, want 16", res.StatusCode, status)
				}
			case strings.HasPrefix(tt.contentType, "application/connect+"):
				// End-of-stream message: a 5-byte envelope prefix, then JSON with the error.
				if res.StatusCode != http.StatusOK || len(data) < 5 || !strings.Contains(string(data[5:]), `"code":"unauthenticated"`) {
					t.Fatalf("Connect stream refusal: HTTP %d %q, want an end-of-stream unauthenticated", res.StatusCode, data)
				}
			default:
				var e struct{ Code, Message string }
				if err := json.Unmarshal(data, &e); err != nil || res.StatusCode != http.StatusUnauthorized || e.Code != "unauthenticated" {
					t.Fatalf("Connect refusal: HTTP %d %q, want 401 with code unauthenticated", res.StatusCode, data)
				}
			}
		})
	}
	t.Run("good token still served", func(t *testing.T) {
		t.Parallel()
		if code := call(t, h2cClient(), base, unaryProc, aliceToken); code != 0 {
			t.Fatalf("call with a good token = %v, want ok", code)
		}
	})
}

// TestAuthRefusalLabels: requests refused before routing are counted under their procedure
// when it exists, and under "other" when the path is made up, so random paths cannot grow
// the metric's label set.
func TestAuthRefusalLabels(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "tokens", "alice "+aliceToken+"\n", 0o600)
	tokens, err := server.LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _, _ := edgeServer(t, server.Config{Tokens: tokens}, 0)
	base := "http://" + addr
	for i := range 3 {
		call(t, http.DefaultClient, base, demoPath+"Made"+strings.Repeat("x", i), "")
	}
	call(t, http.DefaultClient, base, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "")
	_, body := getStatus(t, http.DefaultClient, base+"/metrics")
	for _, want := range []string{
		`coordkit_rpc_requests_total{code="unauthenticated",procedure="other"} 3`,
		`coordkit_rpc_requests_total{code="unauthenticated",procedure="/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%.3000s", want, body)
		}
	}
	if strings.Contains(body, "Madex") {
		t.Errorf("/metrics names a made-up procedure:\n%.3000s", body)
	}
}
