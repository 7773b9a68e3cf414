// Package zklock is the lock backend on a ZooKeeper ensemble, following ZooKeeper's lock recipe
// (ephemeral sequential nodes, each waiter watching the one ahead) and fixing what it leaves out.
//
// Every key has a parent node under Root (the key base64url-encoded), a container node that
// the ensemble (3.5.3 or later) removes once its line is empty; every acquisition adds an
// EPHEMERAL_SEQUENTIAL child. The lowest child holds the lock; every other child waits,
// watching only its predecessor (no herd, first come first served). The lease itself lives in
// the holder node's data (owner, hold count, ttl), so any service instance can re-enter,
// renew, release or inspect a lock another instance acquired; every change is a versioned
// write, so two instances never overwrite each other.
//
// A lease ends at the first of: release; its ttl passing without renewal, measured from the
// node's mtime on the ZooKeeper leader's clock (the instance that wrote it deletes it on a
// timer, and any instance that meets it expired deletes it too); the session its node belongs
// to expiring, when that instance dies or loses the ensemble for the session timeout. The
// fencing token is the creation zxid of the node that started the lease.
//
// A lease moves to the session of the instance that last renewed or re-entered it. An
// instance can vouch only for its own session, so a renewal or re-entry through an instance
// whose session does not own the lease's node replaces the node, in one atomic multi-op, with
// one of its own session that keeps the lease's place in line, its fencing token and its data
// (takeover.go). Every ExpiresAt is therefore start + min(ttl, own session timeout), about a
// session the promising instance knows. A release promises nothing and never moves a lease.
//
// Node data is JSON with a format number; this build writes format 2 (the lease's own ttl and
// the token carried across takeovers) and reads formats 1 and 2, so it upgrades a running
// ensemble in place. Builds that read only format 1 refuse format 2 nodes rather than lose
// the carried token: finish a rolling upgrade before relying on calls through old instances.
//
// While an instance has no session it fails every call with lock.ErrUnavailable: it cannot
// vouch for any lock it cannot see.
package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/services/lock"
)

// Defaults of Config.
const (
	// DefaultRoot is the node every key's parent lives under.
	DefaultRoot = "/coordkit/locks"
	// DefaultSessionTimeout is the ZooKeeper session timeout asked for.
	DefaultSessionTimeout = 10 * time.Second
)

// engine names the backend in lock.ErrUnavailable messages.
const engine = "zookeeper"

// Config configures Open. The zero value is usable.
type Config struct {
	// Root is the node the locks live under; default DefaultRoot. Open creates it, and its
	// parents, when missing.
	Root string
	// SessionTimeout is the session timeout asked of the ensemble; default
	// DefaultSessionTimeout. It is how long the ensemble keeps a silent instance's leases: a
	// crashed or partitioned instance's locks free up this long after its last contact. The
	// ensemble clamps it to its [minSessionTimeout, maxSessionTimeout]; keep it inside.
	SessionTimeout time.Duration
	// Logger receives session changes and the client library's own messages (at debug);
	// default slog.Default().
	Logger *slog.Logger
}

// Backend implements lock.FairBackend on ZooKeeper. Each Backend is one ZooKeeper session.
type Backend struct {
	lock.ExpiryHook
	conn    *zk.Conn
	root    string
	session time.Duration
	log     *slog.Logger

	clock   serverClock
	state   stateWatch
	timers  expiryTimers
	orphans orphanList
	leases  leaseCache

	// life ends on Close: background work runs under it and callers see it as unavailable.
	life context.Context
	stop context.CancelFunc

	mu      sync.Mutex // guards closed and wg.Add, so Close's Wait never races an Add
	closed  bool
	wg      sync.WaitGroup
	closing sync.Once

	// abandoned, set by Close, makes the connection fail its next write and refuse new dials,
	// so the client library's closeSession never reaches the ensemble: the session, and the
	// leases it holds, then end by expiry, never before the expiry their holders were told.
	abandoned atomic.Bool

	// wakeups counts a waiter's watch notifications; tests check a release wakes one waiter.
	wakeups atomic.Int64
}

var (
	_ lock.FairBackend    = (*Backend)(nil)
	_ lock.ExpiryReporter = (*Backend)(nil)
)

// Open connects to the ensemble at servers (host:port each), waits for a session (as long as
// ctx allows), creates cfg.Root when missing and returns the backend. Close leaves the
// session to expire, so the locks this backend holds stay held until then (or until a
// renewal through another instance takes them over); CloseSession ends it at once.
func Open(ctx context.Context, servers []string, cfg Config) (*Backend, error) {
	if len(servers) == 0 {
		return nil, errors.New("zklock: no ZooKeeper server given")
	}
	root := cfg.Root
	if root == "" {
		root = DefaultRoot
	}
	if !strings.HasPrefix(root, "/") || path.Clean(root) != root || root == "/" {
		return nil, fmt.Errorf("zklock: root %q must be an absolute, clean node path below /", root)
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Backend{root: root, session: cfg.SessionTimeout, log: cfg.Logger}
	b.life, b.stop = context.WithCancel(context.Background())
	b.state.init()
	b.timers.init()
	b.orphans.init()
	b.leases.init()

	conn, _, err := zk.Connect(servers, cfg.SessionTimeout, zk.WithDialer(dialer(cfg.SessionTimeout, &b.abandoned)),
		zk.WithLogger(zkLogger{b.log}), zk.WithLogInfo(false), zk.WithEventCallback(b.onEvent))
	if err != nil {
		b.stop()
		return nil, fmt.Errorf("zklock: connect to %v: %w", servers, err)
	}
	b.conn = conn
	if err := b.start(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("zklock: open %v: %w", servers, err)
	}
	return b, nil
}

// start waits for the first session, makes sure the root exists and takes the first clock
// sample, so the first expiry decision already has one.
func (b *Backend) start(ctx context.Context) error {
	for {
		changed := b.state.changed()
		if b.conn.State() == zk.StateHasSession {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("no session: %w", context.Cause(ctx))
		}
	}
	parts := strings.Split(b.root[1:], "/")
	for i := range parts {
		if err := b.createPersistent(ctx, "/"+strings.Join(parts[:i+1], "/")); err != nil {
			return err
		}
	}
	if err := b.sampleClock(ctx); err != nil {
		return err
	}
	b.goTracked(b.housekeeping)
	return nil
}

// Close stops the backend without ending its session: the connection is dropped and the
// ensemble expires the session after its timeout, as after a crash. Ending it instead would
// make ZooKeeper delete this backend's lease nodes at once, and a rival would be granted a
// lock whose holder was told it is held until a later expires_at (every reported expiry is
// capped at the session timeout, so expiry never comes before it). Holders keep their locks
// across a graceful restart of this instance by renewing through another one, which takes
// the lease node over. Waiter nodes are not leases: those that calls left behind are removed
// first (for up to two seconds), so nobody waits behind them. Background work stops before
// Close returns.
func (b *Backend) Close() error {
	b.close(false)
	return nil
}

// CloseSession ends the session at once: ZooKeeper deletes this backend's nodes, so its
// locks are free and its waiters leave their lines, even before the expiry their holders
// were told. Only for when every holder is known to be gone (tests simulate a session that
// expired with it); a service shuts down with Close.
func (b *Backend) CloseSession() error {
	b.close(true)
	return nil
}

func (b *Backend) close(endSession bool) {
	b.closing.Do(func() {
		if !endSession && b.connected() {
			// The calls through this backend have ended (a server drains them before it
			// closes its backends), but the waiter nodes some of them left to housekeeping
			// would hold their lines until their ttl: take them back while the session is
			// still ours. Ending the session would too, but also free the leases.
			ctx, cancel := context.WithTimeout(b.life, closeReclaimTimeout)
			b.reclaimOrphans(ctx)
			cancel()
			if n := b.orphans.left(); n > 0 {
				b.log.Warn("zklock: closing with orphaned lock nodes not taken back; they end with their ttl or the session", "nodes", n)
			}
		}
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		b.stop()
		b.timers.stopAll()
		if !endSession {
			b.abandoned.Store(true)
		}
		b.conn.Close()
		b.wg.Wait()
	})
}

// goTracked runs f in a goroutine Close waits for; after Close it does nothing and says so.
func (b *Backend) goTracked(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// parentPath is the node under which key's line lives.
func (b *Backend) parentPath(key string) string {
	return b.root + "/" + parentName(key)
}

// leaseEnd is the ExpiresAt a lease granted from start with ttl can promise. The lease also
// ends if the session its node belongs to expires: this backend's own, since every grant and
// renewal writes a node of this session (rewrite takes leases of other sessions over first),
// and the ensemble expires it no sooner than the session timeout after this instance's last
// contact (at or after start).
func (b *Backend) leaseEnd(start time.Time, ttl time.Duration) time.Time {
	return start.Add(min(ttl, b.session))
}

// zkLogger routes the ZooKeeper client's log lines to slog at debug: it logs every reconnect
// attempt, which is noise next to the backend's own session messages.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(fmt.Sprintf(format, args...), "component", "zookeeper-client")
	}
}
