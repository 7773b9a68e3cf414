package lock_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
	"github.com/coordkit/coordkit/services/lock/sqllock"
)

// backendCase is one lock engine under test. store makes a fresh, isolated store on the real
// engine and returns a function that opens one more backend instance on it, as another
// service process would. Adding a backend to every behaviour is one line in backends.
type backendCase struct {
	name  string
	store func(t *testing.T) (open func(t *testing.T) lock.Backend)
	// unary makes the clients of pair and eventPair send every call as its own request
	// (client.WithBatching(0)); by default they batch concurrent calls, as the SDK does.
	unary bool
}

// transports are the two ways the conformance table reaches the service: through the SDK's
// batching (concurrent calls travel together in Batch requests) and as plain unary calls.
var transports = []struct {
	name  string
	unary bool
}{{"batched", false}, {"unary", true}}

// clientOptions are the options of bc's clients.
func (bc backendCase) clientOptions() []client.Option {
	if bc.unary {
		return []client.Option{client.WithBatching(0)}
	}
	return nil
}

// connectClient is a client of bc's transport over the Connect protocol. A batched one sends
// every call that can be batched through the Batch RPC, a lone one as a Batch of one
// (WithLoneBatches), through batchedTransport, which holds every request a moment so that
// calls made meanwhile queue and leave together as one Batch.
func (bc backendCase) connectClient(url string) *client.Client {
	if bc.unary {
		return client.New(url, client.WithBatching(0))
	}
	return client.New(url, client.WithHTTPClient(&http.Client{Transport: batchedTransport}), client.WithLoneBatches())
}

// batchedTransport is the HTTP transport of the batched conformance clients; it counts the
// Batch requests they send, and TestConformance checks there were some.
var batchedTransport = &countingTransport{base: client.DefaultHTTPClient().Transport, hold: time.Millisecond}

// countingTransport holds every request for hold before sending it and counts the Batch
// requests.
type countingTransport struct {
	base    http.RoundTripper
	hold    time.Duration
	batches atomic.Int64
}

// RoundTrip implements http.RoundTripper.
func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/Batch") {
		c.batches.Add(1)
	}
	time.Sleep(c.hold)
	return c.base.RoundTrip(r)
}

var backends = []backendCase{
	{name: "redis", store: redisStore},
	{name: "redlock", store: redlockStore},
	{name: "zookeeper", store: zookeeperStore},
	{name: "mysql", store: mysqlStore},
	{name: "postgres", store: postgresStore},
	{name: "sqlite", store: sqliteStore},
}

func redisStore(t *testing.T) func(t *testing.T) lock.Backend {
	prefix := testenv.Prefix(t)
	testenv.CleanRedis(t, testenv.Redis(t, ""), prefix)
	return func(t *testing.T) lock.Backend {
		return redislock.New(redisconf.Pipelined(testenv.Redis(t, "")), redislock.Config{Prefix: prefix}) // as lockservice.Open wires it
	}
}

func sqliteStore(t *testing.T) func(t *testing.T) lock.Backend {
	path := filepath.Join(t.TempDir(), "locks.db")
	return func(t *testing.T) lock.Backend {
		b, err := sqllock.OpenSQLite(context.Background(), path, sqllock.Config{})
		if err != nil {
			t.Fatalf("open sqlite: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
}

// instance is one running lock service with a client for it.
type instance struct {
	url    string
	client *client.Client
	// stop shuts the service down as SIGTERM would and returns Serve's result; the test's
	// cleanup calls it too, and later calls return the first result.
	stop func() error
	// svc is the service, for tests that close it after stop, as coord serve does.
	svc *lock.Service
}

// startInstance serves a lock service on b through the real server bootstrap on a loopback
// port, as `coord serve` does, and stops it when the test ends. It has no events: its
// waiters poll.
func startInstance(t *testing.T, name string, b lock.Backend) *instance {
	return startInstanceWith(t, name, b, nil)
}

// startInstanceWith is startInstance with events on bus. The periodic re-check is off, so a
// lost wake-up shows as a wait until the holder's expiry.
func startInstanceWith(t *testing.T, name string, b lock.Backend, bus *event.Bus) *instance {
	t.Helper()
	return serveLock(t, lock.Config{Backends: map[string]lock.Backend{name: b}, Events: bus, Recheck: -1})
}

// grpcClient talks gRPC over cleartext HTTP/2 (h2c) to an instance, the other protocol the
// bootstrap serves on the same port.
func grpcClient(url string, opts ...client.Option) *client.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: p}}
	return client.New(url, append([]client.Option{client.WithHTTPClient(hc), client.WithConnectOptions(connect.WithGRPC())}, opts...)...)
}

// pair starts two service instances on one store of bc and returns a client of each: the
// first speaks the Connect protocol over HTTP/1.1, the second gRPC over h2c. They share
// events as two `coord serve` processes would: the first runs the embedded NATS server with
// --nats-listen, the second connects to it with --nats-url.
func pair(t *testing.T, bc backendCase) (*client.Client, *client.Client) {
	open := bc.store(t)
	busA, busB := busPair(t)
	a := startInstanceWith(t, bc.name, open(t), busA)
	b := startInstanceWith(t, bc.name, open(t), busB)
	return bc.connectClient(a.url), grpcClient(b.url, bc.clientOptions()...)
}

// busPair returns the event buses of two instances: the first runs an embedded NATS server
// on a free loopback port, the second is connected to it.
func busPair(t *testing.T) (*event.Bus, *event.Bus) {
	t.Helper()
	a := openBus(t, event.Config{Listen: "127.0.0.1:0"})
	return a, openBus(t, event.Config{URL: publisherURL(a)})
}

// publisherURL is the URL of the embedded server of b, with Listen, that logs in as its
// publisher: another coord instance, or an attacker who stole its password.
func publisherURL(b *event.Bus) string {
	u, err := url.Parse(b.ClientURL())
	if err != nil {
		panic(err)
	}
	u.User = url.UserPassword(b.Auth().Publisher.User, b.Auth().Publisher.Password)
	return u.String()
}

func openBus(t *testing.T, cfg event.Config) *event.Bus {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b, err := event.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("event.Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// wantCode fails unless err carries the Connect code want.
func wantCode(t *testing.T, err error, want connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want code %v", want)
	}
	if got := connect.CodeOf(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
}

// within fails unless ch closes within d.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
}

// must turns a (value, error) call into a value, failing the test on error:
// res := must(call())(t).
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}
