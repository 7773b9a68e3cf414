package sqllock

import (
	"context"
	"database/sql"
)

// statements are prepared once per backend: the MySQL driver otherwise prepares, executes
// and closes every statement with arguments, two round trips instead of one, and a lock
// transaction holds its row lock across them.
type statements struct {
	peekRow, lockRow, insertRow, update, lockFloor *sql.Stmt
}

func (s *statements) prepare(ctx context.Context, db *sql.DB, d Dialect) error {
	cols := "SELECT owner, holder_id, hold_count, fencing_token, expires_at, ttl_ms, " + d.NowMillis +
		" FROM " + leasesTable + " WHERE scope = ? AND lock_key = ?"
	for _, p := range []struct {
		st **sql.Stmt
		q  string
	}{
		{&s.peekRow, cols},
		{&s.lockRow, cols + d.ForUpdate},
		// A placeholder: free, reclaimable once its keep-free period has passed (an acquire
		// that stopped between creating the row and taking it leaves it behind).
		{&s.insertRow, d.InsertIgnore + " INTO " + leasesTable + " (scope, lock_key, expires_at) VALUES (?, ?, " + d.NowMillis + " + ?)"},
		{&s.update, "UPDATE " + leasesTable + " SET owner = ?, holder_id = ?, hold_count = ?, fencing_token = ?, expires_at = ?, ttl_ms = ?" +
			" WHERE scope = ? AND lock_key = ?"},
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

func (s *statements) close() {
	for _, st := range []*sql.Stmt{s.peekRow, s.lockRow, s.insertRow, s.update, s.lockFloor} {
		if st != nil {
			st.Close()
		}
	}
}
