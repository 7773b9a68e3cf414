package sqllock

import (
	"context"
	"fmt"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// mysqlConns caps each instance's connections: a lock transaction takes about a millisecond,
// so 16 carry thousands of operations per second while leaving room under max_connections
// (151 by default) for many instances.
const mysqlConns = 16

// OpenMySQL connects to the MySQL or MariaDB database in dsn (see sqldb.OpenMySQL), creates
// the lock tables if needed, and returns a backend on it that owns the connection pool. At most 12 of its 16 connections run TryAcquire at once, so
// a crowd of waiters cannot keep Release and Renew waiting for a connection.
func OpenMySQL(ctx context.Context, dsn string, cfg Config) (*Backend, error) {
	db, err := sqldb.OpenMySQL(ctx, dsn, mysqlConns)
	return owning(ctx, db, err, cfg)
}

// owning returns a backend on db that owns it (Close closes it), given what opening db
// returned; db is closed when the backend cannot start.
func owning(ctx context.Context, db *sqldb.DB, openErr error, cfg Config) (*Backend, error) {
	if openErr != nil {
		return nil, fmt.Errorf("sqllock: %w", openErr)
	}
	b, err := New(ctx, db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	b.owned = db
	return b, nil
}
