// Package server is the one bootstrap every coordkit service runs on: Connect handlers on one
// mux, served over HTTP/1.1 and cleartext HTTP/2 (h2c) on one port, with gRPC health,
// reflection, Prometheus metrics, structured logs and graceful shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config holds the server settings. The zero value of every field means its default.
type Config struct {
	// Addr is the TCP address to listen on; default 127.0.0.1:8080.
	Addr string
	// Logger receives request and lifecycle logs; default slog.Default().
	Logger *slog.Logger
	// ReadHeaderTimeout bounds how long a client may take to send request headers; default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long; default 2m.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful drain after the serve context ends; default 15s.
	ShutdownTimeout time.Duration
	// MaxRequestBytes caps a request message; default 1 MiB.
	MaxRequestBytes int
	// CompressMinBytes is the smallest response gzipped for clients that accept it; 0 means
	// never. Off by default: on the LAN these services run on, gzip costs more CPU than it
	// saves (it halved batch ID throughput in `coord bench id`, and was a quarter of the lock
	// service's CPU at tens of bytes per message).
	CompressMinBytes int
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 1 << 20
	}
	return c
}

// ErrShutdown is the cause of a request context that the server ended because it is shutting
// down; handlers map it to unavailable so clients retry on another instance.
var ErrShutdown = errors.New("server: shutting down")

// Server serves Connect services. Register services with Handle, then call Serve or
// ListenAndServe; Handler gives the whole mux for tests that bring their own listener.
type Server struct {
	cfg      Config
	mux      *http.ServeMux
	registry *prometheus.Registry
	rpc      *rpcMetrics

	mu       sync.Mutex
	names    []string
	finished bool
}

// New returns a server with its metrics registry and interceptors ready.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Server{
		cfg:      cfg,
		mux:      http.NewServeMux(),
		registry: reg,
		rpc:      newRPCMetrics(reg),
	}
}

// Logger is the server's logger, for services to log with the same handler.
func (s *Server) Logger() *slog.Logger { return s.cfg.Logger }

// Registry is where services register their own Prometheus collectors; /metrics serves it.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// HandlerOptions returns the options every service handler must be built with: metrics and
// logging interceptors (which see every error as the Connect error the client gets), panic
// recovery and the request size limit.
func (s *Server) HandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithInterceptors(s.rpc, logInterceptor{log: s.cfg.Logger}, edgeErrors{}),
		connect.WithReadMaxBytes(s.cfg.MaxRequestBytes),
		connect.WithCompressMinBytes(s.compressMinBytes()),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			s.cfg.Logger.ErrorContext(ctx, "panic in handler", "procedure", spec.Procedure, "panic", fmt.Sprint(p))
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	}
}

func (s *Server) compressMinBytes() int {
	if s.cfg.CompressMinBytes <= 0 {
		return math.MaxInt32
	}
	return s.cfg.CompressMinBytes
}

// Handle mounts a Connect service as returned by its generated NewXServiceHandler, and lists
// it for health checks and reflection. It panics when called after Handler, like a mux would
// on a duplicate pattern: it is a programming error.
func (s *Server) Handle(path string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		panic("server: Handle called after Handler")
	}
	s.names = append(s.names, strings.Trim(path, "/"))
	s.mux.Handle(path, h)
}

// Handler returns the complete mux: the registered services plus gRPC health, reflection and
// /metrics. After the first call no more services can be added.
func (s *Server) Handler() http.Handler {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.finished {
		s.finished = true
		s.mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker(s.names...)))
		reflector := grpcreflect.NewStaticReflector(s.names...)
		s.mux.Handle(grpcreflect.NewHandlerV1(reflector))
		s.mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
		s.mux.Handle("/metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	}
	return s.mux
}

// ListenAndServe listens on Config.Addr and serves until ctx ends, then drains gracefully.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then stops accepting, waits up to ShutdownTimeout for
// in-flight requests and returns. It returns nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// Requests outlive ctx so they can finish during the drain, but long waits (a blocked
	// Acquire) end as soon as shutdown starts, with ErrShutdown as their context's cause.
	base, stopRequests := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopRequests(nil)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Handler:           s.Handler(),
		Protocols:         protocols,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.cfg.Logger.Info("serving", "addr", ln.Addr().String(), "services", s.names)
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.cfg.Logger.Info("shutting down", "drain_timeout", s.cfg.ShutdownTimeout)
	stopRequests(ErrShutdown)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("server: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}
