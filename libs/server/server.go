// Package server is the one bootstrap every coordkit service runs on: Connect handlers on one
// mux, served over HTTP/1.1 and HTTP/2 (cleartext h2c, or TLS with optional client
// certificates) on one port, with bearer-token authentication, gRPC health and /readyz from
// the backends, reflection, Prometheus metrics, structured logs, request limits and graceful
// shutdown.
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
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Config holds the server settings. The zero value of every field means its default.
type Config struct {
	// Logger receives request and lifecycle logs; default slog.Default().
	Logger *slog.Logger
	// ReadHeaderTimeout bounds how long a client may take to send request headers; default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long; default 2m.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful drain after the serve context ends; default 15s.
	ShutdownTimeout time.Duration
	// MaxRequestBytes caps a request message, after decompression (a compressed message
	// stops inflating there) and before (the request body); default 1 MiB.
	MaxRequestBytes int
	// BodyTimeout bounds how long a request body may take to arrive after its headers;
	// default 10s. It ends at the body's end, so it never cuts a long server-side wait or a
	// server stream.
	BodyTimeout time.Duration
	// MaxConns caps the connections open at once (more wait in the kernel's backlog);
	// default from the file-descriptor limit, so clients cannot take every descriptor;
	// negative means no cap.
	MaxConns int
	// TLS serves HTTPS (HTTP/2 and HTTP/1.1 by ALPN, no h2c) with these files; nil serves
	// cleartext HTTP/1.1 and h2c.
	TLS *TLS
	// Tokens, when set, is the set of bearer tokens every RPC but gRPC health needs (see
	// Exempt).
	Tokens *Tokens
	// HealthCacheTTL is how long a service's backend checks are reused by health probes;
	// default 1s.
	HealthCacheTTL time.Duration
	// CompressMinBytes is the smallest response gzipped for clients that accept it; 0 means
	// never. Off by default: on the LAN these services run on, gzip costs more CPU than it
	// saves (it halved batch ID throughput in `coordbench id`, and was a quarter of the lock
	// service's CPU at tens of bytes per message).
	CompressMinBytes int
	// MaxStreams caps the server streams (Watch) open at once on the instance; past it a
	// new one is refused with resource_exhausted. Default DefaultMaxStreams; negative means
	// no cap.
	MaxStreams int
	// MaxStreamsPerToken caps the streams one bearer token holds at once (with Tokens set);
	// default DefaultMaxStreamsPerToken; negative means no cap.
	MaxStreamsPerToken int
}

func (c Config) withDefaults() Config {
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
	if c.BodyTimeout == 0 {
		c.BodyTimeout = 10 * time.Second
	}
	if c.MaxConns == 0 {
		c.MaxConns = defaultMaxConns()
	}
	if c.HealthCacheTTL == 0 {
		c.HealthCacheTTL = time.Second
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.MaxStreamsPerToken == 0 {
		c.MaxStreamsPerToken = DefaultMaxStreamsPerToken
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
	bodies   *bodyLimits
	streams  *streamGate

	mu       sync.Mutex
	mounts   []Mount
	handler  http.Handler // set by the first Handler call; no Mount after
	finished bool
}

// New returns a server with its metrics registry and interceptors ready.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	// Every line logged with a request's context names the caller that authenticated it.
	cfg.Logger = slog.New(callerHandler{cfg.Logger.Handler()})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Server{
		cfg:      cfg,
		mux:      http.NewServeMux(),
		registry: reg,
		rpc:      newRPCMetrics(reg),
		bodies:   &bodyLimits{maxBytes: int64(cfg.MaxRequestBytes) + bodySlack, timeout: cfg.BodyTimeout},
		streams:  newStreamGate(cfg.MaxStreams, cfg.MaxStreamsPerToken, cfg.Tokens, reg),
	}
}

// Logger is the server's logger, for services to log with the same handler.
func (s *Server) Logger() *slog.Logger { return s.cfg.Logger }

// Registry is where services register their own Prometheus collectors; /metrics serves it.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// HandlerOptions returns the options every service handler must be built with:
// authentication when Config.Tokens is set, metrics and logging interceptors (which see every
// error as the Connect error the client gets), the stream limits, panic recovery, the request
// size limit and a gzip that stops inflating at that limit.
func (s *Server) HandlerOptions() []connect.HandlerOption {
	interceptors := []connect.Interceptor{s.rpc}
	if s.cfg.Tokens != nil {
		// After the metrics, so refused calls are counted (unauthenticated); before the rest,
		// so the caller's name is in the context they log with. Handler's middleware has
		// refused unauthenticated requests before their bodies were read; this catches
		// handlers served another way.
		interceptors = append(interceptors, s.auth())
	}
	// The stream gate after the log, so its refusals and revocations are logged.
	interceptors = append(interceptors, logInterceptor{log: s.cfg.Logger}, s.streams, edgeErrors{})
	return []connect.HandlerOption{
		connect.WithInterceptors(interceptors...),
		edgeCodecs(), // JSON decode errors name the field (jsoncodec.go); needs edgeErrors
		connect.WithReadMaxBytes(s.cfg.MaxRequestBytes),
		gzipOption(s.cfg.MaxRequestBytes),
		connect.WithCompressMinBytes(s.compressMinBytes()),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			s.cfg.Logger.ErrorContext(ctx, "panic in handler", "procedure", spec.Procedure, "panic", fmt.Sprint(p))
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	}
}

func (s *Server) auth() authInterceptor {
	return authInterceptor{tokens: s.cfg.Tokens, log: s.cfg.Logger}
}

// procedures lists the RPC procedures of the named services, as far as their descriptors
// are linked into the binary: the metric labels of requests refused before routing.
func procedures(services []string) map[string]bool {
	procs := map[string]bool{}
	for _, name := range services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			continue
		}
		if sd, ok := d.(protoreflect.ServiceDescriptor); ok {
			for i := range sd.Methods().Len() {
				procs["/"+name+"/"+string(sd.Methods().Get(i).Name())] = true
			}
		}
	}
	return procs
}

func (s *Server) compressMinBytes() int {
	if s.cfg.CompressMinBytes <= 0 {
		return math.MaxInt32
	}
	return s.cfg.CompressMinBytes
}

// Handle mounts a Connect service as returned by its generated NewXServiceHandler, and lists
// it for health checks (always SERVING) and reflection. It panics when called after Handler,
// like a mux would on a duplicate pattern: it is a programming error.
func (s *Server) Handle(path string, h http.Handler) {
	s.Mount(Mount{Path: path, Handler: h})
}

// Mount mounts a service with its backend checks and startup summary. It panics when called
// after Handler.
func (s *Server) Mount(m Mount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		panic("server: Mount called after Handler")
	}
	if m.Name == "" {
		m.Name = serviceName(m.Path)
	}
	s.mounts = append(s.mounts, m)
	s.mux.Handle(m.Path, m.Handler)
}

// serviceName is the fully qualified service name of a route prefix.
func serviceName(path string) string { return strings.Trim(path, "/") }

// Handler returns the complete handler: the mounted services plus gRPC health, reflection,
// /metrics, /healthz and /readyz, behind the request body limits. After the first call no
// more services can be mounted.
func (s *Server) Handler() http.Handler {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.finished {
		s.finished = true
		names := make([]string, len(s.mounts))
		for i, m := range s.mounts {
			names[i] = serviceName(m.Path)
		}
		h := newHealth(s.cfg.HealthCacheTTL, s.mounts)
		opts := s.HandlerOptions()
		rpc := map[string]bool{}
		for _, m := range s.mounts {
			rpc[m.Path] = true
		}
		handleRPC := func(path string, h http.Handler) {
			s.mux.Handle(path, h)
			rpc[path] = true
		}
		handleRPC(grpchealth.NewHandler(h, opts...))
		reflector := grpcreflect.NewStaticReflector(names...)
		handleRPC(grpcreflect.NewHandlerV1(reflector, opts...))
		handleRPC(grpcreflect.NewHandlerV1Alpha(reflector, opts...))
		s.mux.Handle("/metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
		s.mux.HandleFunc("GET /healthz", healthz)
		s.mux.HandleFunc("GET /readyz", h.readyz)
		s.handler = s.bodies.wrap(withStreamCut(s.mux))
		if s.cfg.Tokens != nil {
			// Outermost: a request without a valid token is refused on its headers.
			procs := procedures(names)
			for _, name := range []string{grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName} {
				procs["/"+name+"/ServerReflectionInfo"] = true // its one method
			}
			s.handler = s.auth().middleware(s.mux, rpc, procs, s.rpc, s.handler)
		}
	}
	return s.handler
}

// Reload reads the TLS files and the tokens file again (as on SIGHUP). A file that fails to
// load keeps the one in force; the errors are returned joined.
func (s *Server) Reload() error {
	var err error
	if s.cfg.TLS != nil {
		err = errors.Join(err, s.cfg.TLS.Reload())
	}
	if s.cfg.Tokens != nil {
		err = errors.Join(err, s.cfg.Tokens.Reload())
	}
	return err
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
	if s.cfg.TLS != nil {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	hs := &http.Server{
		Handler:           s.Handler(),
		Protocols:         protocols,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	if s.cfg.MaxConns > 0 {
		ln = newLimitListener(ln, s.cfg.MaxConns)
	}
	errc := make(chan error, 1)
	if s.cfg.TLS != nil {
		hs.TLSConfig = s.cfg.TLS.Config()
		go func() { errc <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- hs.Serve(ln) }()
	}
	s.cfg.Logger.Info("serving", s.startupLine(ln.Addr())...)
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.cfg.Logger.Info("shutting down", "drain_timeout", s.cfg.ShutdownTimeout)
	stopRequests(ErrShutdown)
	s.bodies.shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close() //nolint:errcheck // already failing; the connections go either way
		return fmt.Errorf("server: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// startupLine is the one line logged when the server starts serving: where (the real
// address, a port 0 resolved), how (scheme, client certificates, tokens) and each service
// with its summary.
func (s *Server) startupLine(addr net.Addr) []any {
	scheme := "http"
	if s.cfg.TLS != nil {
		scheme = "https"
	}
	line := []any{"addr", addr.String(), "url", scheme + "://" + addr.String()}
	if s.cfg.TLS != nil {
		line = append(line, "mtls", s.cfg.TLS.MutualTLS())
	}
	if s.cfg.Tokens != nil {
		line = append(line, "auth", "bearer", "tokens", s.cfg.Tokens.Len())
	} else {
		line = append(line, "auth", "none")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.mounts {
		if len(m.Summary) == 0 {
			line = append(line, slog.String(m.Name, "on"))
			continue
		}
		line = append(line, slog.Group(m.Name, m.Summary...))
	}
	return line
}
