package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
)

// MinTokenBytes is the shortest bearer token a tokens file may hold: shorter ones are
// guessable, so loading the file fails.
const MinTokenBytes = 16

// healthPrefix is the route of gRPC health, the one RPC service exempt from authentication:
// load balancers and orchestrators probe it without credentials.
const healthPrefix = "/grpc.health.v1.Health/"

// Exempt says whether an RPC procedure is served without a token. The rule: gRPC health
// only. Every other RPC, reflection included (it describes the whole API), needs a token; the
// plain HTTP endpoints /healthz, /readyz and /metrics are outside Connect and never need one.
func Exempt(procedure string) bool { return strings.HasPrefix(procedure, healthPrefix) }

var (
	// ErrMissingToken is the unauthenticated error of a request without a bearer token.
	ErrMissingToken = errors.New("server: missing bearer token: send Authorization: Bearer <token>")
	// ErrUnknownToken is the unauthenticated error of a request whose token is not in the
	// tokens file.
	ErrUnknownToken = errors.New("server: unknown bearer token")
)

// token is one entry of a tokens file: the token is kept only as its SHA-256, so comparisons
// take the same time whatever the presented token's length, and a heap dump shows no secret.
type token struct {
	name string
	sum  [sha256.Size]byte
}

// Tokens is the set of bearer tokens a server accepts, loaded from a file and reloadable
// while the server runs. The zero value is unusable; use LoadTokens.
type Tokens struct {
	path string
	log  *slog.Logger
	set  atomic.Pointer[[]token]

	mu       sync.Mutex
	onReload []func() // run after each successful Reload, with the new set in force
}

// LoadTokens reads a tokens file: one `name token` pair per line, separated by spaces or
// tabs; blank lines and lines starting with # are ignored. Names and tokens must be unique
// and every token at least MinTokenBytes long. A file other users can read is accepted with
// a warning on log (default slog.Default()).
func LoadTokens(path string, log *slog.Logger) (*Tokens, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &Tokens{path: path, log: log}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the file again and, only when it is valid, replaces the set: a bad file keeps
// the tokens in force and returns the error.
func (t *Tokens) Reload() error {
	set, err := readTokens(t.path, t.log)
	if err != nil {
		return err
	}
	t.set.Store(&set)
	t.mu.Lock()
	fns := slices.Clone(t.onReload)
	t.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	return nil
}

// afterReload registers fn to run after every successful Reload: the server cuts the streams
// of the tokens the reload removed.
func (t *Tokens) afterReload(fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onReload = append(t.onReload, fn)
}

// has says whether the token with digest sum is in force.
func (t *Tokens) has(sum [sha256.Size]byte) bool {
	for _, tk := range *t.set.Load() {
		if subtle.ConstantTimeCompare(sum[:], tk.sum[:]) == 1 {
			return true
		}
	}
	return false
}

// Len is how many tokens are in force.
func (t *Tokens) Len() int { return len(*t.set.Load()) }

// Lookup returns the name of presented, or false. It compares against every token in
// constant time, so the time taken tells nothing about which token came close.
func (t *Tokens) Lookup(presented string) (string, bool) {
	tk, ok := t.lookup(presented)
	return tk.name, ok
}

func (t *Tokens) lookup(presented string) (token, bool) {
	sum := sha256.Sum256([]byte(presented))
	var match token
	found := 0
	for _, tk := range *t.set.Load() {
		if subtle.ConstantTimeCompare(sum[:], tk.sum[:]) == 1 {
			match, found = tk, 1
		}
	}
	return match, found == 1
}

func readTokens(path string, log *slog.Logger) ([]token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("server: tokens file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().Perm()&0o004 != 0 {
		log.Warn("tokens file is readable by every user: chmod 600 it", "path", path, "mode", st.Mode().Perm())
	}
	var set []token
	names, sums := map[string]int{}, map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if line == 1 {
			text = strings.TrimPrefix(text, "\uFEFF") // the byte order mark Windows editors write
		}
		text = strings.TrimSpace(text) // CRLF line ends too
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("server: tokens file %s line %d: want `name token`, got %d fields", path, line, len(fields))
		}
		name, secret := fields[0], fields[1]
		if len(secret) < MinTokenBytes {
			// Not naming the name: with the columns swapped (`token name`), it is the secret.
			return nil, fmt.Errorf("server: tokens file %s line %d: the token (second column) is %d bytes, want at least %d", path, line, len(secret), MinTokenBytes)
		}
		sum := sha256.Sum256([]byte(secret))
		if prev, dup := names[name]; dup {
			return nil, fmt.Errorf("server: tokens file %s line %d: name %q already on line %d", path, line, name, prev)
		}
		if prev, dup := sums[sum]; dup {
			return nil, fmt.Errorf("server: tokens file %s line %d: same token as line %d", path, line, prev)
		}
		names[name], sums[sum] = line, line
		set = append(set, token{name: name, sum: sum})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("server: tokens file %s: %w", path, err)
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("server: tokens file %s holds no token: every request would be refused", path)
	}
	return set, nil
}

type callerKey struct{}

// Caller is the name of the token that authenticated ctx's request, or "" when the server
// requires none.
func Caller(ctx context.Context) string {
	tk, _ := ctx.Value(callerKey{}).(token)
	return tk.name
}

// callerToken is the token that authenticated ctx's request, if any.
func callerToken(ctx context.Context) (token, bool) {
	tk, ok := ctx.Value(callerKey{}).(token)
	return tk, ok
}

// authInterceptor refuses RPCs without a valid bearer token with unauthenticated, and puts
// the token's name in the context for the handler and every log line of the request.
type authInterceptor struct {
	tokens *Tokens
	log    *slog.Logger
}

// authenticate returns ctx carrying the caller's token, or the unauthenticated error.
func (a authInterceptor) authenticate(ctx context.Context, procedure, header, peer string) (context.Context, error) {
	if Exempt(procedure) {
		return ctx, nil
	}
	if _, ok := callerToken(ctx); ok {
		return ctx, nil // authenticated by the middleware, before the body was read
	}
	presented, ok := bearer(header)
	if !ok {
		a.log.WarnContext(ctx, "unauthenticated", "procedure", procedure, "caller", "missing", "peer", peer)
		return ctx, connect.NewError(connect.CodeUnauthenticated, ErrMissingToken)
	}
	tk, ok := a.tokens.lookup(presented)
	if !ok {
		a.log.WarnContext(ctx, "unauthenticated", "procedure", procedure, "caller", "unknown", "peer", peer)
		return ctx, connect.NewError(connect.CodeUnauthenticated, ErrUnknownToken)
	}
	return context.WithValue(ctx, callerKey{}, tk), nil
}

// middleware authenticates every RPC that mux routes to one of the patterns in rpc before
// the request's body is read: a request without a valid token costs its headers only, not
// the decoding of a megabyte of JSON. The refusal is written in the request's protocol
// (Connect, gRPC or gRPC-Web) with code unauthenticated, as the interceptor would, and
// counted in m. Exempt procedures and the plain HTTP endpoints pass through.
func (a authInterceptor) middleware(mux *http.ServeMux, rpc map[string]bool, procedures map[string]bool, m *rpcMetrics, next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); !rpc[pattern] || Exempt(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		ctx, err := a.authenticate(r.Context(), r.URL.Path, r.Header.Get("Authorization"), r.RemoteAddr)
		if err == nil {
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		label := r.URL.Path
		if !procedures[label] {
			label = "other" // a made-up path must not grow the metric's label set
		}
		m.observe(label, start, err)
		if r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody {
			// The body is left unread: the connection cannot carry another request.
			w.Header().Set("Connection", "close")
		}
		errs.Write(w, r, err) //nolint:errcheck // the client went away; nothing to do
	})
}

// bearer is the token of an Authorization header value "Bearer <token>": the scheme in any
// case (RFC 9110 section 11.1), then spaces or tabs, as HTTP clients send it.
func bearer(header string) (string, bool) {
	const scheme = "Bearer"
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) ||
		(header[len(scheme)] != ' ' && header[len(scheme)] != '\t') {
		return "", false
	}
	presented := strings.Trim(header[len(scheme):], " \t")
	return presented, presented != ""
}

// WrapUnary implements connect.Interceptor.
func (a authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, err := a.authenticate(ctx, req.Spec().Procedure, req.Header().Get("Authorization"), req.Peer().Addr)
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor; servers have no client streams.
func (a authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (a authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := a.authenticate(ctx, conn.Spec().Procedure, conn.RequestHeader().Get("Authorization"), conn.Peer().Addr)
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// callerHandler adds the authenticated caller's name to every record logged with a request's
// context, so the request's log lines say who made it.
type callerHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h callerHandler) Handle(ctx context.Context, r slog.Record) error {
	if name := Caller(ctx); name != "" {
		r = r.Clone()
		r.AddAttrs(slog.String("caller", name))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h callerHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return callerHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h callerHandler) WithGroup(name string) slog.Handler {
	return callerHandler{h.Handler.WithGroup(name)}
}
