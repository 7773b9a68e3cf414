package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// OpenSQLite opens (creating if needed) the SQLite lock database at path, in WAL mode with
// IMMEDIATE transactions and a busy timeout, and returns a backend on it (DefaultScope) that
// owns the database handle.
func OpenSQLite(ctx context.Context, path string) (*Backend, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("sqllock: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqllock: open %s: %w", path, err)
	}
	// One connection: SQLite runs one writer at a time anyway, and a single connection makes
	// writers of this process queue in Go instead of sleeping in SQLite's busy handler.
	db.SetMaxOpenConns(1)
	b, err := New(ctx, db, SQLite, "")
	if err != nil {
		db.Close()
		return nil, err
	}
	b.ownsDB = true
	return b, nil
}
