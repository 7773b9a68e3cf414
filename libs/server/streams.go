package server

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// Stream limits by default (Config.MaxStreams, Config.MaxStreamsPerToken).
const (
	// DefaultMaxStreams is how many server streams (Watch, health Watch) one instance keeps
	// open at once.
	DefaultMaxStreams = 1000
	// DefaultMaxStreamsPerToken is how many of them one bearer token may hold.
	DefaultMaxStreamsPerToken = 100
)

// ErrTokenRevoked ends, with code unauthenticated, the open streams and the calls in
// progress of a token that a reload of the tokens file removed.
var ErrTokenRevoked = errors.New("server: the bearer token of this call was removed from the tokens file")

// streamGate bounds the server streams open at once, per instance and per bearer token, and
// ends a token's streams and unary calls in progress when a reload removes it. Past a limit a new stream is refused with
// resource_exhausted before its handler runs. Without tokens every caller is the same
// anonymous one, so only the instance limit applies; with tokens the exempt streams (gRPC
// health) share one anonymous allowance of the per-token size.
type streamGate struct {
	max, perToken int // <= 0: no limit
	tokens        *Tokens

	mu      sync.Mutex
	total   int
	byToken map[[32]byte]int
	live    map[*openStream]struct{}
	calls   map[*openStream]struct{} // unary calls in progress, with tokens only

	open    prometheus.Gauge
	refused *prometheus.CounterVec
	revoked prometheus.Counter
}

// openStream is one stream in progress.
type openStream struct {
	tk      token
	authed  bool
	revoked bool // under streamGate.mu
	cancel  context.CancelCauseFunc
}

func newStreamGate(max, perToken int, tokens *Tokens, reg prometheus.Registerer) *streamGate {
	g := &streamGate{
		max: max, perToken: perToken, tokens: tokens,
		byToken: map[[32]byte]int{}, live: map[*openStream]struct{}{}, calls: map[*openStream]struct{}{},
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coordkit_streams_open",
			Help: "Server streams (Watch) open on this instance.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_streams_refused_total",
			Help: "Server streams refused with resource_exhausted, by the limit they met: instance or token.",
		}, []string{"limit"}),
		revoked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coordkit_streams_revoked_total",
			Help: "Open server streams ended because a tokens-file reload removed their token.",
		}),
	}
	reg.MustRegister(g.open, g.refused, g.revoked)
	if tokens != nil {
		tokens.afterReload(g.revoke)
	}
	return g
}

// enter admits a stream or says which limit refuses it.
func (g *streamGate) enter(ctx context.Context, cancel context.CancelCauseFunc) (*openStream, error) {
	s := &openStream{cancel: cancel}
	s.tk, s.authed = callerToken(ctx)
	perToken := g.perToken > 0 && g.tokens != nil // without tokens, every caller is one
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.max > 0 && g.total >= g.max:
		g.refused.WithLabelValues("instance").Inc()
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("server: %d streams open on this instance, its limit: retry later or on another instance", g.total))
	case perToken && g.byToken[s.tk.sum] >= g.perToken:
		g.refused.WithLabelValues("token").Inc()
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("server: this token has %d streams open, the limit per token: close some first", g.byToken[s.tk.sum]))
	}
	g.total++
	g.byToken[s.tk.sum]++
	g.live[s] = struct{}{}
	g.open.Set(float64(g.total))
	if s.authed && !g.tokens.has(s.tk.sum) {
		cancel(ErrTokenRevoked) // removed by a reload that ran after the stream authenticated
	}
	return s, nil
}

func (g *streamGate) leave(s *openStream) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.live, s)
	g.total--
	if g.byToken[s.tk.sum]--; g.byToken[s.tk.sum] <= 0 {
		delete(g.byToken, s.tk.sum)
	}
	g.open.Set(float64(g.total))
}

// revoke ends the streams whose token the tokens file no longer holds; it runs after each
// reload.
func (g *streamGate) revoke() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for s := range g.live {
		if s.authed && !s.revoked && !g.tokens.has(s.tk.sum) {
			s.revoked = true
			s.cancel(ErrTokenRevoked)
			g.revoked.Inc()
		}
	}
	for c := range g.calls {
		if !g.tokens.has(c.tk.sum) {
			c.cancel(ErrTokenRevoked)
		}
	}
}

// WrapUnary implements connect.Interceptor. Unary calls are not bounded here, but with
// tokens a call in progress is ended like a stream when a reload removes its token: a
// blocking Acquire or Pick may wait an hour, and must not take a lock or a task for a token
// that no longer exists. A call that finished first keeps its answer.
func (g *streamGate) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	if g.tokens == nil {
		return next
	}
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		tk, authed := callerToken(ctx)
		if !authed {
			return next(ctx, req) // exempt (gRPC health): no token to revoke
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		c := &openStream{tk: tk, authed: true, cancel: cancel}
		g.mu.Lock()
		g.calls[c] = struct{}{}
		g.mu.Unlock()
		// After the call is in calls: a reload either finds it there or swapped the set first.
		if !g.tokens.has(tk.sum) {
			cancel(ErrTokenRevoked) // removed by a reload that ran after the call authenticated
		}
		res, err := next(ctx, req)
		g.mu.Lock()
		delete(g.calls, c)
		g.mu.Unlock()
		if err != nil && errors.Is(context.Cause(ctx), ErrTokenRevoked) {
			return nil, connect.NewError(connect.CodeUnauthenticated, ErrTokenRevoked)
		}
		return res, err
	}
}

// WrapStreamingClient implements connect.Interceptor; servers have no client streams.
func (g *streamGate) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (g *streamGate) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		s, err := g.enter(ctx, cancel)
		if err != nil {
			return err
		}
		defer g.leave(s)
		err = next(ctx, conn)
		if errors.Is(context.Cause(ctx), ErrTokenRevoked) {
			return connect.NewError(connect.CodeUnauthenticated, ErrTokenRevoked)
		}
		return err
	}
}
