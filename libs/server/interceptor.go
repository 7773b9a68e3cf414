package server

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// rpcMetrics counts and times every RPC by procedure and Connect code.
type rpcMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_rpc_requests_total",
			Help: "RPCs handled, by procedure and Connect code (ok for success).",
		}, []string{"procedure", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordkit_rpc_duration_seconds",
			Help:    "RPC handling time, by procedure and Connect code; includes server-side lock waits.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"procedure", "code"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

func (m *rpcMetrics) observe(procedure string, start time.Time, err error) {
	code := codeOf(err)
	m.requests.WithLabelValues(procedure, code).Inc()
	m.duration.WithLabelValues(procedure, code).Observe(time.Since(start).Seconds())
}

// WrapUnary implements connect.Interceptor.
func (m *rpcMetrics) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		res, err := next(ctx, req)
		m.observe(req.Spec().Procedure, start, err)
		return res, err
	}
}

// WrapStreamingClient implements connect.Interceptor; servers have no client streams.
func (m *rpcMetrics) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (m *rpcMetrics) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		m.observe(conn.Spec().Procedure, start, err)
		return err
	}
}

// logInterceptor logs failed RPCs: server-side failures at warn; client mistakes, calls the
// caller canceled or let expire, and calls ended by the server's shutdown at debug.
type logInterceptor struct{ log *slog.Logger }

func (l logInterceptor) record(ctx context.Context, procedure string, start time.Time, err error) {
	if err == nil {
		return
	}
	level := slog.LevelDebug
	switch connect.CodeOf(err) {
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeUnavailable, connect.CodeDataLoss:
		if !Ended(err) {
			level = slog.LevelWarn
		}
	}
	l.log.Log(ctx, level, "rpc failed", "procedure", procedure, "code", codeOf(err),
		"duration", time.Since(start), "error", err)
}

// WrapUnary implements connect.Interceptor.
func (l logInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		res, err := next(ctx, req)
		l.record(ctx, req.Spec().Procedure, start, err)
		return res, err
	}
}

// WrapStreamingClient implements connect.Interceptor; servers have no client streams.
func (l logInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (l logInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		l.record(ctx, conn.Spec().Procedure, start, err)
		return err
	}
}

// codeOf is the code label of an RPC's outcome; errors reach it through edgeErrors, so it is
// the code the client gets.
func codeOf(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

// edgeErrors turns every error a handler returns into the Connect error the client gets,
// through Error, before metrics and logs see it. Handlers map their own errors, but some
// arrive bare: connect-go answers a request whose deadline already passed (Connect-Timeout-Ms:
// 0) with ctx.Err() before the handler runs, which would otherwise be counted as unknown, and
// a request ended by the server's shutdown must be unavailable, not canceled. It also answers
// a JSON request that did not decode (see jsonCodec) before the handler sees it.
type edgeErrors struct{}

// WrapUnary implements connect.Interceptor.
func (edgeErrors) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := decodeFailure(req.Any()); err != nil {
			return nil, err
		}
		res, err := next(ctx, req)
		return res, Error(ctx, err)
	}
}

// WrapStreamingClient implements connect.Interceptor; servers have no client streams.
func (edgeErrors) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (edgeErrors) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return Error(ctx, next(ctx, decodeChecked{conn}))
	}
}

// decodeChecked fails a Receive whose JSON message did not decode (see jsonCodec): streaming
// handlers receive inside the interceptor chain, after WrapStreamingHandler.
type decodeChecked struct{ connect.StreamingHandlerConn }

// Receive implements connect.StreamingHandlerConn.
func (c decodeChecked) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	return decodeFailure(m)
}
