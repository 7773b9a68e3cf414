package workerid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// SQL leases worker ids in the table coordkit_idgen_workers, one row per id created up front:
// (worker_id, owner, expires_at, last_ms), expiry on the database's clock. The same code runs
// on SQLite, MySQL and PostgreSQL; only sqldb.Dialect differs.
type SQL struct {
	db *sqldb.DB

	pickFree, take, renew, check, release string
}

var _ Store = (*SQL)(nil)

// NewSQL creates the table and its rows if needed and returns a store on db. The caller
// keeps ownership of db.
func NewSQL(ctx context.Context, db *sqldb.DB) (*SQL, error) {
	d := db.Dialect
	rows := make([]string, Count)
	for i := range rows {
		rows[i] = fmt.Sprintf("(%d)", i)
	}
	table := `CREATE TABLE IF NOT EXISTS coordkit_idgen_workers (
		worker_id  INTEGER      NOT NULL PRIMARY KEY,
		owner      ` + d.Key + ` NOT NULL DEFAULT '',
		expires_at ` + d.Int64 + ` NOT NULL DEFAULT 0,
		last_ms    ` + d.Int64 + ` NOT NULL DEFAULT 0
	)` + d.TableOptions
	if err := db.CreateTable(ctx, "coordkit_idgen_workers", table); err != nil {
		return nil, fmt.Errorf("workerid: %s schema: %w", d.Name, err)
	}
	// Every instance inserts every row; the rows that exist stay as they are.
	fill := d.InsertIgnore + " INTO coordkit_idgen_workers (worker_id) VALUES " + strings.Join(rows, ",") + d.OnConflictIgnore
	if _, err := db.ExecContext(ctx, fill); err != nil {
		return nil, fmt.Errorf("workerid: %s schema: %w", d.Name, err)
	}
	return &SQL{
		db: db,
		pickFree: "SELECT worker_id, last_ms FROM coordkit_idgen_workers WHERE expires_at <= " + d.NowMillis +
			" ORDER BY worker_id LIMIT 1" + d.ForUpdate,
		take: "UPDATE coordkit_idgen_workers SET owner = ?, expires_at = " + d.NowMillis + " + ? WHERE worker_id = ?",
		renew: "UPDATE coordkit_idgen_workers SET expires_at = " + d.NowMillis + " + ?," +
			" last_ms = CASE WHEN last_ms < ? THEN ? ELSE last_ms END" +
			" WHERE worker_id = ? AND owner = ? AND expires_at > " + d.NowMillis,
		check:   "SELECT COUNT(*) FROM coordkit_idgen_workers WHERE worker_id = ? AND owner = ? AND expires_at > " + d.NowMillis,
		release: "UPDATE coordkit_idgen_workers SET owner = '', expires_at = 0, last_ms = ? WHERE worker_id = ? AND owner = ?",
	}, nil
}

// Acquire implements Store: the lowest expired row is locked and taken in one transaction.
func (s *SQL) Acquire(ctx context.Context, owner string, ttl time.Duration) (Lease, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Lease{}, unavailable(ctx, s.db.Dialect.Name, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	l := Lease{Owner: owner}
	err = tx.QueryRowContext(ctx, s.pickFree).Scan(&l.ID, &l.LastMillis)
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, ErrNoFreeID
	}
	if err != nil {
		return Lease{}, unavailable(ctx, s.db.Dialect.Name, err)
	}
	if _, err := tx.ExecContext(ctx, s.take, owner, ttl.Milliseconds(), l.ID); err != nil {
		return Lease{}, unavailable(ctx, s.db.Dialect.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return Lease{}, unavailable(ctx, s.db.Dialect.Name, err)
	}
	return l, nil
}

// Renew implements Store.
func (s *SQL) Renew(ctx context.Context, id int, owner string, ttl time.Duration, lastMillis int64) error {
	res, err := s.db.ExecContext(ctx, s.renew, ttl.Milliseconds(), lastMillis, lastMillis, id, owner)
	if err != nil {
		return unavailable(ctx, s.db.Dialect.Name, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	// MySQL counts a row whose values did not change (two renewals in one millisecond) as
	// not affected: ask whether the lease is still ours before calling it lost.
	var held int
	if err := s.db.QueryRowContext(ctx, s.check, id, owner).Scan(&held); err != nil {
		return unavailable(ctx, s.db.Dialect.Name, err)
	}
	if held == 0 {
		return ErrLost
	}
	return nil
}

// Release implements Store.
func (s *SQL) Release(ctx context.Context, id int, owner string, lastMillis int64) error {
	if _, err := s.db.ExecContext(ctx, s.release, lastMillis, id, owner); err != nil {
		return unavailable(ctx, s.db.Dialect.Name, err)
	}
	return nil
}

// Close implements Store; the database belongs to the caller.
func (s *SQL) Close() error { return nil }
