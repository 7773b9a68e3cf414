package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ctlKey carries a stream request's responseCtl in its context, for CutStream.
type ctlKey struct{}

// responseCtl is a request's response controller, usable from other goroutines while its
// handler runs.
type responseCtl struct {
	mu   sync.Mutex
	rc   *http.ResponseController
	set  bool // a write deadline was set
	done bool // the handler returned: rc must not be used
}

// withStreamCut lets the handlers of streaming requests (Connect streams, gRPC) be cut
// with CutStream. Unary Connect requests, most of the traffic, pass untouched.
func withStreamCut(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if !strings.HasPrefix(ct, "application/connect+") && !strings.HasPrefix(ct, "application/grpc") {
			next.ServeHTTP(w, r)
			return
		}
		c := &responseCtl{rc: http.NewResponseController(w)}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctlKey{}, c)))
		c.mu.Lock()
		defer c.mu.Unlock()
		c.done = true
		if c.set {
			// An HTTP/1.1 connection outlives its request: the next one starts without it.
			c.rc.SetWriteDeadline(time.Time{}) //nolint:errcheck // it worked when set
		}
	})
}

// CutStream gives the response of ctx's request d more time to be written: a write still
// blocked after that (the client stopped reading and the transport's buffers are full)
// fails, which ends the handler's stream (the client sees the stream reset, or on HTTP/1.1
// the connection closed). A stream that falls behind calls it so that a client that never
// reads again cannot hold a goroutine and a stream slot for ever. It may be called from any
// goroutine while the handler runs, and does nothing after it returned or for requests that
// Handler did not serve.
func CutStream(ctx context.Context, d time.Duration) {
	c, ok := ctx.Value(ctlKey{}).(*responseCtl)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done && c.rc.SetWriteDeadline(time.Now().Add(d)) == nil {
		c.set = true
	}
}
