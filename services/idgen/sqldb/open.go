package sqldb

import (
	"context"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// mysqlConns is small: reservations are rare (one per segment, one lease renewal every few
// seconds) and short.
const mysqlConns = 8

// OpenSQLite opens (creating if needed) the SQLite database at path with the settings of
// libs/sqldb.OpenSQLite.
func OpenSQLite(ctx context.Context, path string) (*DB, error) {
	db, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		return nil, err
	}
	return &DB{DB: db, Dialect: SQLite}, nil
}

// OpenMySQL connects to the MySQL or MariaDB database in dsn (go-sql-driver format, e.g.
// user:pass@tcp(host:3306)/coordkit) with the settings of libs/sqldb.OpenMySQL.
func OpenMySQL(ctx context.Context, dsn string) (*DB, error) {
	db, err := sqldb.OpenMySQL(ctx, dsn, mysqlConns)
	if err != nil {
		return nil, err
	}
	return &DB{DB: db, Dialect: MySQL}, nil
}
