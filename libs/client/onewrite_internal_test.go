package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// writeCounter counts the writes on the connections its dialer makes.
type writeCounter struct{ writes atomic.Int64 }

func (w *writeCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return countedConn{Conn: c, w: w}, nil
}

type countedConn struct {
	net.Conn
	w *writeCounter
}

func (c countedConn) Write(p []byte) (int, error) {
	c.w.writes.Add(1)
	return c.Conn.Write(p)
}

// echoServer serves one Connect unary procedure that answers its request's value.
func echoServer(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/test.Echo/Echo", connect.NewUnaryHandler("/test.Echo/Echo",
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(req.Msg), nil
		}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/test.Echo/Echo"
}

// TestOneWritePerCall: a Connect unary call through the SDK's transport leaves in one write,
// headers and body together; through net/http's own transport it takes two (the reason
// oneWrite exists: if that row fails, net/http learned to do this itself). A body too large
// to copy still arrives whole.
func TestOneWritePerCall(t *testing.T) {
	url := echoServer(t)
	tests := []struct {
		name       string
		oneWrite   bool
		value      string
		wantWrites int64 // per call; 0: not checked
	}{
		{"small body, SDK transport", true, "lock operations", 1},
		{"small body, net/http transport", false, "lock operations", 2},
		{"body over the copy limit", true, strings.Repeat("x", maxOneWriteBody+1), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var counter writeCounter
			tr := defaultTransport()
			tr.DialContext = counter.dial
			var rt http.RoundTripper = tr
			if tt.oneWrite {
				rt = oneWrite{tr}
			}
			c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](&http.Client{Transport: rt}, url)
			call := func() {
				t.Helper()
				res, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String(tt.value)))
				if err != nil {
					t.Fatal(err)
				}
				if res.Msg.GetValue() != tt.value {
					t.Fatalf("echo: got %d bytes, want %d", len(res.Msg.GetValue()), len(tt.value))
				}
			}
			call() // dials the connection
			if tt.wantWrites == 0 {
				return
			}
			counter.writes.Store(0)
			const calls = 20
			for range calls {
				call()
			}
			if got := counter.writes.Load(); got != tt.wantWrites*calls {
				t.Errorf("%d writes for %d calls, want %d per call", got, calls, tt.wantWrites)
			}
		})
	}
}

// recordingTransport keeps the request it was given and what its body and GetBody read.
type recordingTransport struct {
	req           *http.Request
	body, getBody []byte
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.req = req
	r.body, _ = io.ReadAll(req.Body)
	b, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r.getBody, _ = io.ReadAll(b)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// closeRecorder is a body of a type net/http does not know, remembering whether it was
// closed.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// TestOneWriteLeavesTheRequestAlone: oneWrite sends a copy of the caller's request whose body
// and GetBody both read the whole body, closes the caller's body as a RoundTripper must, and
// changes nothing in the caller's request.
func TestOneWriteLeavesTheRequestAlone(t *testing.T) {
	payload := []byte("a batch of lock operations")
	body := &closeRecorder{Reader: bytes.NewReader(payload)}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/x", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(payload))
	var base recordingTransport
	if _, err := (oneWrite{&base}).RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if base.req == req {
		t.Error("the caller's request itself was sent: a RoundTripper must not change it")
	}
	if req.Body != body || req.GetBody != nil {
		t.Error("the caller's request was changed")
	}
	if !body.closed {
		t.Error("the caller's body was not closed")
	}
	if !bytes.Equal(base.body, payload) || !bytes.Equal(base.getBody, payload) {
		t.Errorf("sent body %q, GetBody %q; want %q", base.body, base.getBody, payload)
	}
}

// TestOneWriteBodyLength: a body that does not match its ContentLength fails the request, as
// net/http fails it, instead of being cut or padded; none is sent.
func TestOneWriteBodyLength(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		length  int64
		wantErr bool
	}{
		{"exact", "0123456789", 10, false},
		{"longer than its length", "0123456789", 4, true},
		{"shorter than its length", "0123", 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/x", &closeRecorder{Reader: strings.NewReader(tt.body)})
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tt.length
			var base recordingTransport
			_, err = (oneWrite{&base}).RoundTrip(req)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if tt.wantErr && base.req != nil {
				t.Error("the request was sent")
			}
			if !tt.wantErr && string(base.body) != tt.body {
				t.Errorf("sent %q, want %q", base.body, tt.body)
			}
		})
	}
}

// TestDefaultClientClosesIdleConnections: http.Client.CloseIdleConnections reaches only a
// transport that has the method, so oneWrite passes it on: without, DefaultHTTPClient's idle
// connections and their goroutines stayed for IdleConnTimeout.
func TestDefaultClientClosesIdleConnections(t *testing.T) {
	closed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	hc := DefaultHTTPClient()
	res, err := hc.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	hc.CloseIdleConnections()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // closing is at once; the margin is a loaded machine's
		t.Fatal("DefaultHTTPClient().CloseIdleConnections() left the idle connection open")
	}
}

// TestFullDuplexOverHTTP2: over HTTP/2 a request body of known length may be produced only
// after the response has started; oneWrite leaves https:// requests alone, so such a call
// works as through net/http (read first, it hung past its context).
func TestFullDuplexOverHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	cfg := &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	hc := defaultHTTPClient(cfg)
	pr, pw := io.Pipe()
	// The call answers at once; its deadline only has to outlast a TLS handshake on a loaded
	// machine, and the test's own to show a call that hangs past it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, pr)
	req.ContentLength = 5
	done := make(chan error, 1)
	go func() {
		res, err := hc.Do(req)
		if err != nil {
			done <- err
			return
		}
		pw.Write([]byte("hello"))
		pw.Close()
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil && string(b) != "hello" {
			err = errors.New("echo " + string(b))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		pw.CloseWithError(errors.New("test gave up"))
		<-done
		t.Fatal("no response 5s after the call's context ended")
	}
}
