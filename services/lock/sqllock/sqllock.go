// Package sqllock is the lock backend on a SQL database, following the classic unique-key
// method: one row per key (the primary key makes two holders impossible) with owner, hold
// count, fencing token, expiry and the lease's own ttl. Every operation is one short
// transaction that locks the key's row, decides in Go and writes back: no transaction is
// ever held open for a lease. A scope column lets several coordkit deployments share one
// database without sharing locks.
//
// # Expiry
//
// The database's clock decides expiry, in whole milliseconds, truncated. A lease of ttl
// granted when that clock read now is stored as now + 1 + ttl rounded up to milliseconds,
// and the row stays held while expires_at > the clock: it is let go strictly after the
// reported expires_at, which the service measures before asking the database. On SQLite the
// database's clock is the process's steady clock (sqldb.OpenSQLite), which a step of the wall
// clock does not move; a new process gives every lease it finds its whole ttl again, since
// the wall clock its clock starts from may have been stepped while no process ran.
//
// # Storage bounded by live state
//
// The table coordkit_lock_leases holds the live leases and little else. A released key's
// row stays, free, for a short while (Config.KeepFree, 10s by default), so a busy key keeps
// reusing it; then a janitor in every instance deletes it (Config.ReclaimInterval, 10s). The
// janitor also deletes expired leases and the placeholder rows of acquires interrupted
// between creating a key's row and taking it, in batches of at most 64 rows, each batch one
// short transaction. Several instances may run it at once: each row is locked and checked
// again before it is deleted. Reclaim runs a pass on demand.
//
// Fencing tokens keep rising across deletions through fence floors:
// coordkit_lock_fences(scope, bucket, fence_floor) holds FenceBuckets rows per scope, and a
// key's bucket is FNV-1a-32(key) mod FenceBuckets. Deleting a row raises its bucket's floor
// to the row's token in the same transaction; a new row's first holder gets floor + 1, read
// with a locking read in the acquiring transaction. While a row lives its token only grows,
// so every token a key is given exceeds every token it was given before, however often its
// row was deleted in between. Keys of one bucket share only this lower bound (their tokens
// may jump), and tokens of different keys stay unrelated. The tables hold the live leases,
// the keys freed or expired within the last keep-free period plus a janitor interval, and
// FenceBuckets floors per scope: nothing grows with the number of keys ever used.
//
// # Deadlocks
//
// On InnoDB, a key's row is created by an INSERT IGNORE that runs on its own, before the
// transaction that takes it: inserting inside the transaction, after a locking read found
// no row, would let two first-time acquirers deadlock on gap locks. SQLite's write
// transactions lock the whole database, and PostgreSQL takes no gap locks (see the Postgres
// dialect), so there the insert (INSERT … ON CONFLICT DO NOTHING on PostgreSQL) runs inside
// the transaction, before it locks anything else.
// The other locks are taken in one order everywhere: key rows before fence rows, several key
// rows (the janitor) in key order in one statement, several fence rows in bucket order in
// one statement. The one cycle left is InnoDB's own: a freshly deleted row stays as a
// delete-marked record until purged, and two statements that insert or lock that key at
// once can each take a shared lock on it and then both need it exclusively. InnoDB rolls
// one back whole; every statement and transaction here is then simply run again, which is
// safe because nothing of it was applied.
//
// # Contended attempts are reads
//
// An attempt on a lock someone else holds is one plain read, with no transaction and no row
// lock, so a crowd of waiters never queues on the row the holder needs for Release and Renew.
// The reads of concurrent operations go out together, as one statement (peeks.go).
// Statements are prepared once (the MySQL driver otherwise prepares each one anew, a second
// round trip inside every transaction).
//
// # A read, then one conditional write
//
// Acquire, Release and Renew decide on that plain read and write the decision with one
// UPDATE that applies only to the row exactly as read (cas.go); only when the row changed
// meanwhile do they run the transaction described above. On PostgreSQL the conditional
// writes of concurrent operations go out together, as one statement (cas.go). On a pool of more than 4 connections a backend runs
// at most that many less 4 attempts at once, and never more than 12 (12 of OpenMySQL's 16),
// keeping the others for Release, Renew and Inspect, and on a shared pool for other services.
//
// # Upgrading from the single-table layout
//
// Versions before the fence floors kept every key's row forever in coordkit_locks. A
// scope's first start on this version creates its fence floors at that table's highest
// token and copies its live leases (their expiry 2 ms later, the old rounding's error; their
// own ttl the service's default), once, in the transaction that creates the floors.
// coordkit_locks is only read for scopes not yet upgraded; drop it when none is left. Stop
// every instance of the old version before starting the new one: the two versions do not
// see each other's leases.
//
// # Holder ids and owner digests
//
// The owner column holds the digest of the owner's secret that the service passes, never the
// secret; holder_id holds the lease's random public id (lock.NewHolderID), drawn when the
// lease begins and kept by re-entries, renewals and partial releases. A table from before
// holder_id gets the column at the first start (ALTER TABLE, once, whichever instance comes
// first); its live rows keep the plain owners older versions stored, which no digest
// matches: they stay held, by a holder without id, until they expire (or until the janitor
// deletes them after), and nobody can release or renew them early.
package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/coordkit/coordkit/libs/client/batch"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/lock"
)

// Backend implements lock.Backend on a SQL database.
type Backend struct {
	lock.ExpiryHook
	db    *sql.DB
	d     Dialect
	scope string
	owned *sqldb.DB // the handle Close closes, when the backend opened it
	o     options
	st    statements
	slots chan struct{}                    // TryAcquires at once; nil: no bound
	group *batch.Coalescer[txJob, bool]    // group commit (group.go); nil: off
	peeks *batch.Coalescer[string, peeked] // batched plain reads (peeks.go)
	steps stepStatements                   // a batch's set statements (steps.go)
	cases *batch.Coalescer[casJob, bool]   // batched compare-and-set (cas.go); nil: off

	stopJanitor context.CancelFunc
	janitorDone chan struct{}
	closeOnce   sync.Once
	closeErr    error
}

var _ lock.ExpiryReporter = (*Backend)(nil)

// DefaultScope is the scope of a backend whose caller names none.
const DefaultScope = "default"

// Config configures a Backend; the zero value of each field means its default.
type Config struct {
	// Scope namespaces the backend's locks in a shared database; default DefaultScope.
	Scope string
	// KeepFree is how long a released key keeps its row, free, before the janitor may delete
	// it (default 10s): a key locked again within it reuses the row. Off makes it
	// reclaimable at once.
	KeepFree time.Duration
	// ReclaimInterval is how often the backend's janitor deletes reclaimable rows (default
	// 10s); Off runs no background janitor, leaving Reclaim to the caller.
	ReclaimInterval time.Duration
	// Logger is where the janitor reports failures; default slog.Default().
	Logger *slog.Logger
}

// Off turns a duration of Config off: KeepFree: Off frees a released key's row at once,
// ReclaimInterval: Off runs no janitor. (0 means the default.)
const Off time.Duration = -1

// options are a Config with its defaults applied.
type options struct {
	keepFree, interval time.Duration
	logger             *slog.Logger
}

// orDefault is d, def when d is 0, and 0 when d is negative (Off).
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d == 0:
		return def
	}
	return d
}

// New creates the schema and this scope's fence floors if needed (migrating a scope of the
// single-table layout, see the package doc) and returns a backend on db whose locks live in
// cfg.Scope, in the lock dialect of db's engine (SQLite, MySQL or PostgreSQL). Its janitor runs until
// Close. The caller keeps ownership of db, which other services may share: see the package
// doc for how many TryAcquires run on its pool at once.
func New(ctx context.Context, db *sqldb.DB, cfg Config) (*Backend, error) {
	d, err := dialectOf(db.Dialect)
	if err != nil {
		return nil, err
	}
	scope := cfg.Scope
	if scope == "" {
		scope = DefaultScope
	}
	o := options{
		keepFree: orDefault(cfg.KeepFree, 10*time.Second),
		interval: orDefault(cfg.ReclaimInterval, 10*time.Second),
		logger:   cfg.Logger,
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	b := &Backend{db: db.DB, d: d, scope: scope, o: o}
	b.reserveConns(db.Stats().MaxOpenConnections)
	b.startGroupCommit()
	b.startPeeks()
	b.startBatchedCAS()
	if err := b.migrate(ctx); err != nil {
		return nil, fmt.Errorf("sqllock: %s schema: %w", d.Name, err)
	}
	if err := b.st.prepare(ctx, db.DB, d); err != nil {
		b.st.close()
		return nil, fmt.Errorf("sqllock: %s: %w", d.Name, err)
	}
	jctx, stop := context.WithCancel(context.Background())
	b.stopJanitor, b.janitorDone = stop, make(chan struct{})
	go b.runJanitor(jctx)
	return b, nil
}

// reserveConns bounds TryAcquire to a pool of conns minus the connections kept for Release,
// Renew and Inspect, and to maxSlots however large the pool: a pool shared with other
// services must keep connections for them too. A pool of at most reserved connections (or
// an unlimited one, 0) gets no bound.
func (b *Backend) reserveConns(conns int) {
	const reserved, maxSlots = 4, 12
	if conns > reserved {
		b.slots = make(chan struct{}, min(conns-reserved, maxSlots))
	}
}

// Close implements lock.Backend: it stops the janitor, waiting for a pass under way, and
// closes the database when the backend opened it.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.stopJanitor()
		<-b.janitorDone
		b.st.close()
		b.steps.close()
		if b.owned != nil {
			b.closeErr = b.owned.Close()
		}
	})
	return b.closeErr
}
