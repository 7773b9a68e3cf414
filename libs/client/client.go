// Package client is the Go SDK for coordkit. Lock gives a held distributed lock with a
// fencing token and a watchdog that renews the lease and says the moment it is lost.
//
//	c := client.New("http://127.0.0.1:8080")
//	l, err := c.Lock(ctx, "order:42", client.WithTTL(10*time.Second))
//	if err != nil { ... }
//	defer l.Unlock(context.Background())
//	// do the work with l.Context(); pass l.FencingToken() to every guarded write.
//
// An https:// base URL speaks HTTP/2 over TLS with the system's roots; WithTLSConfig (and
// LoadTLSConfig for a private CA or a client certificate) and WithToken reach a service that
// runs with TLS and bearer-token auth.
package client

import (
	"crypto/tls"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
)

// Client calls coordkit services at one base URL. It is safe for concurrent use.
type Client struct {
	locks lockv1connect.LockServiceClient
	// rawLocks is the lock API without batching, for the watchdog's retries.
	rawLocks lockv1connect.LockServiceClient
	tasks    taskpickv1connect.TaskPickServiceClient
	ids      *IDs
	backend  string
}

type options struct {
	batching   int
	loneBatch  bool
	httpClient connect.HTTPClient
	tlsConfig  *tls.Config
	token      string
	backend    string
	connect    []connect.ClientOption
	idBlock    int // WithIDBlock
	idMaxBlock int // WithIDMaxBlock
}

// Option configures a Client.
type Option func(*options)

// WithHTTPClient sets the HTTP client; the default keeps up to 256 idle connections per host
// so that many goroutines calling at once reuse connections instead of dialing. It overrides
// WithTLSConfig: give the client's transport its own TLS settings.
func WithHTTPClient(c connect.HTTPClient) Option { return func(o *options) { o.httpClient = c } }

// WithTLSConfig sets the TLS settings of the default HTTP client for an https:// base URL:
// the roots to trust and the client certificate to present. See LoadTLSConfig.
func WithTLSConfig(cfg *tls.Config) Option { return func(o *options) { o.tlsConfig = cfg } }

// WithToken sends "Authorization: Bearer <token>" with every call, unary and streaming. An
// empty token sends nothing. Over a plain http:// URL the token crosses the network in clear:
// use https:// wherever the network is not trusted.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithBackend sets the lock backend used when a call names none; empty means the service's
// default.
func WithBackend(name string) Option { return func(o *options) { o.backend = name } }

// DefaultBatching is how many lock (and task) requests a Client keeps in flight before
// further calls queue and go out together as one Batch request (see WithBatching).
const DefaultBatching = 2

// WithBatching sets how many lock requests, and separately task requests, the client keeps
// in flight at once; calls made
// while all of them are busy queue and leave together, as one Batch request, when one
// comes back. So an idle caller waits for nothing and many concurrent callers share round
// trips instead of paying one each. Every method still answers exactly what its own call
// would. 0 turns batching off: every call is its own request. Default DefaultBatching.
func WithBatching(maxInFlight int) Option { return func(o *options) { o.batching = maxInFlight } }

// WithLoneBatches makes a batching client send even a lone call as a Batch of one
// operation instead of its own unary call. Nothing needs it for speed; it is for checking
// that a service's Batch answers every operation exactly as its single call does (the lock
// conformance suite runs this way), and for a proxy in between that forwards only Batch.
func WithLoneBatches() Option { return func(o *options) { o.loneBatch = true } }

// WithConnectOptions passes options to the generated Connect clients, for example
// connect.WithGRPC() or an interceptor of one's own.
func WithConnectOptions(opts ...connect.ClientOption) Option {
	return func(o *options) { o.connect = append(o.connect, opts...) }
}

// New returns a client for the service at baseURL, such as http://127.0.0.1:8080 or
// https://coordkit.internal:8443.
func New(baseURL string, opts ...Option) *Client {
	o := newOptions(opts)
	httpClient, connectOpts := o.transport()
	rawLocks := lockv1connect.NewLockServiceClient(httpClient, baseURL, connectOpts...)
	var locks lockv1connect.LockServiceClient = rawLocks
	var tasks taskpickv1connect.TaskPickServiceClient = taskpickv1connect.NewTaskPickServiceClient(httpClient, baseURL, connectOpts...)
	if o.batching > 0 {
		bl := newBatchingLocks(locks, o.batching)
		bl.calls.lone = o.loneBatch
		locks = bl
		bt := newBatchingTasks(tasks, o.batching)
		bt.calls.lone = o.loneBatch
		tasks = bt
	}
	return &Client{
		locks:    locks,
		rawLocks: rawLocks,
		tasks:    tasks,
		ids:      newIDs(idgenv1connect.NewIdServiceClient(httpClient, baseURL, connectOpts...), o.idBlock, o.idMaxBlock),
		backend:  o.backend,
	}
}

// Transport returns the HTTP client and Connect options New builds from opts, for calling
// other Connect or gRPC services of the same server (such as grpc.health.v1) with the same
// TLS settings and token.
func Transport(opts ...Option) (connect.HTTPClient, []connect.ClientOption) {
	o := newOptions(opts)
	return o.transport()
}

func newOptions(opts []Option) options {
	o := options{batching: DefaultBatching}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// transport resolves the options into the HTTP client and the Connect client options.
func (o options) transport() (connect.HTTPClient, []connect.ClientOption) {
	httpClient := o.httpClient
	if httpClient == nil {
		httpClient = defaultHTTPClient(o.tlsConfig)
	}
	connectOpts := o.connect
	if o.token != "" {
		connectOpts = append([]connect.ClientOption{connect.WithInterceptors(bearer(o.token))}, connectOpts...)
	}
	return httpClient, connectOpts
}

// DefaultHTTPClient is the HTTP client New uses unless told otherwise: pooled keep-alive
// connections, HTTP/2 for https:// URLs, no overall timeout (each call's context bounds it),
// and a request's headers and small body sent in one write (see oneWrite).
func DefaultHTTPClient() *http.Client { return defaultHTTPClient(nil) }

// defaultHTTPClient is DefaultHTTPClient trusting and presenting what tlsConfig says, when
// it is not nil.
func defaultHTTPClient(tlsConfig *tls.Config) *http.Client {
	t := defaultTransport()
	if tlsConfig != nil {
		t.TLSClientConfig = tlsConfig.Clone()
	}
	return &http.Client{Transport: oneWrite{t}}
}

// defaultTransport is DefaultHTTPClient's connection pool.
func defaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	return t
}

// Locks is the raw lock API, for callers that manage leases themselves (like the CLI). It
// batches concurrent calls like the rest of the client (see WithBatching).
func (c *Client) Locks() lockv1connect.LockServiceClient { return c.locks }
