package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

// engine names the backend in lock.ErrUnavailable messages.
const engine = "redlock"

// DefaultPrefix starts every key the backend writes.
const DefaultPrefix = "coordkit:redlock"

// DefaultNodeTimeout bounds one call to one node when Config.NodeTimeout is zero (it is also
// capped at ttl/10). Redis answers in well under a millisecond on a LAN; a node that takes
// longer is treated as down for that call rather than eating into the lease. 50ms shed load
// under bursts of hundreds of concurrent acquires on a busy 2-core host, hence 200ms.
const DefaultNodeTimeout = 200 * time.Millisecond

// Open's connection settings.
const (
	// poolSize covers a burst of concurrent requests to one node without queueing.
	poolSize = 256
	// maxDials limits the connections being set up to one node at a time. A burst of
	// requests on a cold pool (service start, node back from a restart) would otherwise open
	// one connection per request at once, and the setup storm delays every call past its
	// per-node timeout; with few dials in flight, connections handed back by finished calls
	// serve the waiting ones.
	maxDials = 8
	// dialTimeout bounds a connection attempt outside of a call's own deadline: Open's first
	// contact and go-redis's background reconnection probes.
	dialTimeout = 500 * time.Millisecond
	// pingTimeout bounds Open's PING, which also dials, so it is longer than a node call.
	pingTimeout = time.Second
	// timeoutShare caps the per-node timeout at this fraction of the ttl, so that both rounds
	// of an acquire together leave at least 80% of the ttl as validity.
	timeoutShare = 10
)

// Config configures a Backend.
type Config struct {
	// Prefix starts every key; default DefaultPrefix. It must not contain braces.
	Prefix string
	// NodeTimeout bounds one call to one node; default DefaultNodeTimeout. Calls about a lease
	// (acquire, renew) cap it at a tenth of the lease's ttl, whatever it is set to, so that
	// waiting for a hung node leaves most of the ttl as validity.
	NodeTimeout time.Duration
}

// node is one Redis server of the set.
type node struct {
	rdb  redis.Scripter
	name string // for error messages
}

// Backend implements lock.Backend with Redlock over independent Redis nodes.
type Backend struct {
	nodes   []node
	layout  redislock.Layout
	timeout time.Duration
	// owned are the clients Open made, closed by Close; nil for New.
	owned []*redis.Client
}

var _ lock.Backend = (*Backend)(nil)

// New returns a backend on clients, one per independent Redis node. The backend does not own
// the clients: whoever made them closes them.
//
// Make every client with retries off (redis.Options.MaxRetries = -1): a client cannot know
// whether a script whose reply was lost ran, and running the acquire script twice would count
// one re-entry as two holds. Enable ContextTimeoutEnabled too, or the per-node timeout only
// applies while waiting for a connection, not while waiting for the reply.
func New(clients []redis.Scripter, cfg Config) *Backend {
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	b := &Backend{layout: redislock.NewLayout(prefix), timeout: cfg.NodeTimeout}
	if b.timeout <= 0 {
		b.timeout = DefaultNodeTimeout
	}
	for i, c := range clients {
		name := fmt.Sprintf("node %d", i)
		if o, ok := c.(interface{ Options() *redis.Options }); ok {
			name = o.Options().Addr
		}
		b.nodes = append(b.nodes, node{rdb: c, name: name})
	}
	return b
}

// Open connects to the Redis nodes at addrs and returns a backend that closes them on Close.
// A minority of nodes may be down: the backend works without them and uses them once they
// are back. Open fails when fewer than a majority answer PING, since no lock could be taken.
func Open(ctx context.Context, addrs []string, cfg Config) (*Backend, error) {
	if len(addrs) == 0 {
		return nil, errors.New("redlock: no node addresses")
	}
	seen := make(map[string]bool, len(addrs))
	clients := make([]*redis.Client, 0, len(addrs))
	scripters := make([]redis.Scripter, 0, len(addrs))
	for _, addr := range addrs {
		// One node listed twice would count twice towards every majority.
		if seen[addr] {
			return nil, fmt.Errorf("redlock: node %s listed twice", addr)
		}
		seen[addr] = true
		c := redis.NewClient(&redis.Options{
			Addr:                  addr,
			PoolSize:              poolSize,
			MaxConcurrentDials:    maxDials,
			MaxRetries:            -1, // see New
			DialerRetries:         1,  // a node that refuses is down for this call; no backoff loop
			DialTimeout:           dialTimeout,
			ContextTimeoutEnabled: true, // the per-node timeout must bound the reply too
		})
		clients = append(clients, c)
		scripters = append(scripters, c)
	}
	b := New(scripters, cfg)
	b.owned = clients
	for i, c := range clients { // scripts sent to a node at the same time share a round trip
		b.nodes[i].rdb = redisconf.Pipelined(c)
	}

	replies := fanOut(ctx, b, pingTimeout, nil, func(ctx context.Context, i int, _ redis.Scripter) (struct{}, error) {
		return struct{}{}, clients[i].Ping(ctx).Err()
	})
	errs := failures(b, replies)
	if up := len(addrs) - len(errs); up < b.quorum() {
		b.Close()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("redlock: open: %w", err)
		}
		return nil, fmt.Errorf("redlock: open: %w: %d of %d nodes answer PING, %d needed (%s)",
			lock.ErrUnavailable, up, len(addrs), b.quorum(), joinNodeErrs(errs))
	}
	return b, nil
}

// Close implements lock.Backend: it closes the clients Open made; a backend from New leaves
// its clients to their owner.
func (b *Backend) Close() error {
	var errs []error
	for _, c := range b.owned {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// keys returns the lock hash and fencing counter keys of key, laid out as the single-Redis
// backend does on every node.
func (b *Backend) keys(key string) []string { return b.layout.Keys(key) }

// quorum is the number of nodes that makes a majority.
func (b *Backend) quorum() int { return len(b.nodes)/2 + 1 }

// nodeTimeout is the per-node timeout of a call about a lease of ttl.
func (b *Backend) nodeTimeout(ttl time.Duration) time.Duration {
	return max(min(b.timeout, ttl/timeoutShare), time.Millisecond)
}

// Drift is the clock drift Redlock allows for on a lease of ttl: 1% of the ttl plus 2 ms. A
// lease's validity is ttl − elapsed − Drift(ttl).
func Drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// validity is what is left of a lease of ttl taken at start, or a non-positive duration when
// nothing safe is left.
func validity(start time.Time, ttl time.Duration) time.Duration {
	return ttl - time.Since(start) - Drift(ttl)
}

// checkTTL refuses leases Redis cannot express (PEXPIRE counts whole milliseconds).
func checkTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("redlock: ttl %v is below 1ms", ttl)
	}
	return nil
}
