package sqllock

import (
	"context"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// OpenSQLite opens (creating if needed) the SQLite lock database at path (see
// sqldb.OpenSQLite for its settings) and returns a backend on it that owns the database
// handle.
func OpenSQLite(ctx context.Context, path string, cfg Config) (*Backend, error) {
	db, err := sqldb.OpenSQLite(ctx, path)
	return owning(ctx, db, err, cfg)
}
