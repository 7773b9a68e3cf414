// Package sqltask is the task-pick backend on a SQL database: MySQL 8 / MariaDB 10.6+ or
// PostgreSQL 13+ for instances on several machines, and the embedded SQLite file for the
// zero-setup default.
//
// One table, coordkit_tasks, holds every task of every pool, one row per task: its state
// (available, leased, dead, done), priority, a random position (rnd, for ORDER_RANDOM), run_at
// (when an available task is due; for a leased one, its lease's end; for a dead one, when it
// died; for a done one, when it is purged), its lease token and the digest of its lease's
// secret (lease_hash), attempt counters, payload and last error. A unique key on (pool, id)
// makes Put idempotent. The database's clock decides every time, in whole milliseconds: a lease of ttl taken when it read now ends at now + 1 + ttl, so
// never before the end reported to the worker, which is measured before the database was asked.
// On SQLite that clock is the process's steady clock (sqldb.OpenSQLite), which a step of the
// wall clock does not move; a new process moves the leases it finds by its clock's shift since
// the last process's clock mark (sqldb.DB.TakeClockShift).
//
// A pick is one short transaction: a SELECT of up to n due tasks in the pick's order (on
// MySQL … FOR UPDATE SKIP LOCKED, so concurrent pickers take disjoint tasks without waiting
// for each other; SQLite's IMMEDIATE transactions lock the whole file; a MySQL pick whose
// read skipped due tasks and found fewer than n runs again, first locking those by primary
// key, waiting, since InnoDB's range reads also lock the next pool's first task), then one
// UPDATE that leases them, each with the digest of its lease's secret (lease_hash); the tasks are
// answered in the order read. On PostgreSQL the pick is one statement (pickstatement.go). Ack, Extend and Nack are single statements whose WHERE checks
// the token, the digest and that the lease has not ended, so a stale worker, or one that only
// knows the token, changes nothing. The sweep recovers expired leases with the same locking select, so
// two instances sweeping at once take disjoint rows and never recover one lease twice.
//
// Unique keys live in a second table, coordkit_task_unique (see uniqueTable and
// uniqueput.go): a Put locks its keys' rows in key order, judges each key's holder from its row
// and the holder's task row, and claims the keys of the tasks it adds.
//
// Storage is bounded by live tasks: an Ack deletes the row (or marks it done until the
// retention passes, when a sweep deletes it), and the sweep deletes the rows of unique keys
// whose task is gone or whose period passed.
package sqltask

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/taskpick"
)

// Config configures a Backend.
type Config struct {
	// Retention keeps acked tasks as done for this long (Put of their id then reports them as
	// existing); 0 deletes them at Ack.
	Retention time.Duration
}

// Backend implements taskpick.Backend on db.
type Backend struct {
	db     *sqldb.DB
	d      sqldb.Dialect
	cfg    Config
	ownsDB bool
	st     statements

	mu           sync.Mutex
	byCount      map[string]*sql.Stmt // statements with n placeholders, by text
	uniqueCursor [2]string            // (pool, ukey) where purgeUnique goes on
	uniquePurged time.Time            // when a sweep last ran purgeUnique
}

var _ taskpick.Backend = (*Backend)(nil)

// New creates the table if needed and returns a backend on db. The caller keeps ownership of
// db.
func New(ctx context.Context, db *sqldb.DB, cfg Config) (*Backend, error) {
	if err := migrate(ctx, db); err != nil {
		return nil, err
	}
	if err := redateLeases(ctx, db); err != nil {
		return nil, err
	}
	b := &Backend{db: db, d: db.Dialect, cfg: cfg, byCount: map[string]*sql.Stmt{}}
	if err := b.st.prepare(ctx, b); err != nil {
		b.st.close()
		return nil, fmt.Errorf("sqltask: %s: %w", b.d.Name, err)
	}
	return b, nil
}

// OpenSQLite opens (creating if needed) the SQLite file at path and returns a backend that
// owns it.
func OpenSQLite(ctx context.Context, path string, cfg Config) (*Backend, error) {
	db, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("sqltask: %w", err)
	}
	b, err := New(ctx, db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	b.ownsDB = true
	return b, nil
}

// Close implements taskpick.Backend.
func (b *Backend) Close() error {
	b.st.close()
	b.mu.Lock()
	for _, st := range b.byCount {
		st.Close()
	}
	b.byCount = nil
	b.mu.Unlock()
	if b.ownsDB {
		return b.db.Close()
	}
	return nil
}

// fail maps a database failure to taskpick.ErrUnavailable (or the request's own ending).
func (b *Backend) fail(ctx context.Context, err error) error {
	return server.Unavailable(ctx, taskpick.ErrUnavailable, b.d.Name, err)
}

// tx runs fn in a transaction, again when the database rolled it back as a deadlock victim
// (nothing of it was applied).
func (b *Backend) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	return b.txWith(ctx, nil, fn)
}

// txWith is tx with the transaction's options.
func (b *Backend) txWith(ctx context.Context, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	return b.d.Retry(ctx, func() error { return b.tryTx(ctx, opts, fn) })
}

func (b *Backend) tryTx(ctx context.Context, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// stmtN returns the prepared form of q, cached: for statements whose text depends on a count.
// It does not hold b.mu while it prepares, which waits for a connection of the pool: callers
// holding connections must not wait behind it for the cache.
func (b *Backend) stmtN(ctx context.Context, q string) (*sql.Stmt, error) {
	b.mu.Lock()
	st, ok := b.byCount[q]
	b.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := b.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if had, ok := b.byCount[q]; ok { // prepared meanwhile by another call
		st.Close()
		return had, nil
	}
	if b.byCount == nil { // closed meanwhile
		st.Close()
		return nil, sql.ErrConnDone
	}
	b.byCount[q] = st
	return st, nil
}

// placeholders is "?, ?, …" with n marks.
func placeholders(n int) string {
	s := make([]byte, 0, 3*n)
	for i := range n {
		if i > 0 {
			s = append(s, ", "...)
		}
		s = append(s, '?')
	}
	return string(s)
}

// ceilMillis is d in whole milliseconds, rounded up: no part of a ttl is dropped.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// randomPosition is a task's place in ORDER_RANDOM, drawn anew whenever it becomes available.
func randomPosition() int64 { return int64(rand.Uint32()) }

// errorText is a task's last error as the last_error column takes it: PostgreSQL keeps it
// as BYTEA, since a reason may hold NUL, which its TEXT cannot.
func (b *Backend) errorText(s string) any {
	if b.d.Name == "postgres" {
		return []byte(s)
	}
	return s
}

// fromMillis converts the database clock to a time.
func fromMillis(ms int64) time.Time { return time.UnixMilli(ms) }
