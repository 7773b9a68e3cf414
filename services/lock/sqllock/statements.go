package sqllock

import (
	"context"
	"database/sql"
	"sync"
)

// statements are prepared once per backend: the MySQL driver otherwise prepares, executes
// and closes every statement with arguments, two round trips instead of one, and a lock
// transaction holds its row lock across them.
type statements struct {
	peekRow, lockRow, insertRow, update, casUpdate, lockFloor *sql.Stmt

	mu     sync.Mutex
	closed bool
	peeks  [peekBatch + 1]*sql.Stmt // batched reads by number of keys, prepared when first used
	cases  [casBatch + 1]*sql.Stmt  // batched compare-and-sets by number of rows (cas.go), likewise
}

// rowColumns are the columns scanRow reads, the database clock last.
func rowColumns(d Dialect) string {
	return "owner, holder_id, hold_count, fencing_token, expires_at, ttl_ms, " + d.NowMillis
}

func (s *statements) prepare(ctx context.Context, db *sql.DB, d Dialect) error {
	cols := "SELECT " + rowColumns(d) + " FROM " + leasesTable + " WHERE scope = ? AND lock_key = ?"
	for _, p := range []struct {
		st **sql.Stmt
		q  string
	}{
		{&s.peekRow, cols},
		{&s.lockRow, cols + d.ForUpdate},
		// A placeholder: free, reclaimable once its keep-free period has passed (an acquire
		// that stopped between creating the row and taking it leaves it behind).
		{&s.insertRow, d.InsertIgnore + " INTO " + leasesTable + " (scope, lock_key, expires_at) VALUES (?, ?, " + d.NowMillis + " + ?)" + d.OnConflictIgnore},
		{&s.update, "UPDATE " + leasesTable + " SET owner = ?, holder_id = ?, hold_count = ?, fencing_token = ?, expires_at = ?, ttl_ms = ?" +
			" WHERE scope = ? AND lock_key = ?"},
		// cas.go: the row as read, and its lease as live (or lapsed) as read.
		{&s.casUpdate, "UPDATE " + leasesTable + " SET owner = ?, holder_id = ?, hold_count = ?, fencing_token = ?, expires_at = ?, ttl_ms = ?" +
			" WHERE scope = ? AND lock_key = ? AND owner = ? AND holder_id = ? AND hold_count = ? AND fencing_token = ? AND expires_at = ? AND ttl_ms = ?" +
			" AND (owner = '' OR (expires_at > " + d.NowMillis + ") = ?)"},
		{&s.lockFloor, "SELECT fence_floor FROM " + fencesTable + " WHERE scope = ? AND bucket = ?" + d.ForUpdate},
	} {
		st, err := db.PrepareContext(ctx, p.q)
		if err != nil {
			return err
		}
		*p.st = st
	}
	return nil
}

// peekMany is the prepared batched read of n keys (peeks.go), 1 ≤ n ≤ peekBatch.
func (s *statements) peekMany(ctx context.Context, db *sql.DB, d Dialect, n int) (*sql.Stmt, error) {
	return s.batched(ctx, db, &s.peeks[n], func() string { return peekManySQL(d, n) })
}

// casMany is the prepared batched compare-and-set of n rows (cas.go), 2 ≤ n ≤ casBatch.
func (s *statements) casMany(ctx context.Context, db *sql.DB, d Dialect, n int) (*sql.Stmt, error) {
	return s.batched(ctx, db, &s.cases[n], func() string { return casManySQL(d, n) })
}

// batched is *st, a batched statement prepared from q when first used.
func (s *statements) batched(ctx context.Context, db *sql.DB, st **sql.Stmt, q func() string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, sql.ErrConnDone
	}
	if *st == nil {
		prepared, err := db.PrepareContext(ctx, q())
		if err != nil {
			return nil, err
		}
		*st = prepared
	}
	return *st, nil
}

// batchRows is the number of rows a batched statement of n items lists: a power of two, at
// least 2, so that each connection prepares a few statements (2, 4, 8, 16) instead of one per
// count.
func batchRows(n int) int {
	rows := 2
	for rows < n {
		rows *= 2
	}
	return rows
}

func (s *statements) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, st := range append([]*sql.Stmt{s.peekRow, s.lockRow, s.insertRow, s.update, s.casUpdate, s.lockFloor}, append(s.cases[:], s.peeks[:]...)...) {
		if st != nil {
			st.Close()
		}
	}
}
