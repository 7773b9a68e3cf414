// Package client is the Go SDK for coordkit. Lock gives a held distributed lock with a
// fencing token and a watchdog that renews the lease and says the moment it is lost.
//
//	c := client.New("http://127.0.0.1:8080")
//	l, err := c.Lock(ctx, "order:42", client.WithTTL(10*time.Second))
//	if err != nil { ... }
//	defer l.Unlock(context.Background())
//	// do the work with l.Context(); pass l.FencingToken() to every guarded write.
package client

import (
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/proto/gen/coordkit/taskpick/v1/taskpickv1connect"
)

// Client calls coordkit services at one base URL. It is safe for concurrent use.
type Client struct {
	locks   lockv1connect.LockServiceClient
	tasks   taskpickv1connect.TaskPickServiceClient
	backend string
}

type options struct {
	httpClient connect.HTTPClient
	backend    string
	connect    []connect.ClientOption
}

// Option configures a Client.
type Option func(*options)

// WithHTTPClient sets the HTTP client; the default keeps up to 256 idle connections per host
// so that many goroutines calling at once reuse connections instead of dialing.
func WithHTTPClient(c connect.HTTPClient) Option { return func(o *options) { o.httpClient = c } }

// WithBackend sets the lock backend used when a call names none; empty means the service's
// default.
func WithBackend(name string) Option { return func(o *options) { o.backend = name } }

// WithConnectOptions passes options to the generated Connect clients, for example
// connect.WithGRPC() or an auth interceptor.
func WithConnectOptions(opts ...connect.ClientOption) Option {
	return func(o *options) { o.connect = append(o.connect, opts...) }
}

// New returns a client for the service at baseURL, such as http://127.0.0.1:8080.
func New(baseURL string, opts ...Option) *Client {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.httpClient == nil {
		o.httpClient = DefaultHTTPClient()
	}
	return &Client{
		locks:   lockv1connect.NewLockServiceClient(o.httpClient, baseURL, o.connect...),
		tasks:   taskpickv1connect.NewTaskPickServiceClient(o.httpClient, baseURL, o.connect...),
		backend: o.backend,
	}
}

// DefaultHTTPClient is the HTTP client New uses unless told otherwise: pooled keep-alive
// connections, no overall timeout (each call's context bounds it).
func DefaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: t}
}

// Locks is the raw lock API, for callers that manage leases themselves (like the CLI).
func (c *Client) Locks() lockv1connect.LockServiceClient { return c.locks }
