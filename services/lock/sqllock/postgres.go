package sqllock

import (
	"context"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// postgresConns is the pool OpenPostgres opens when pg.MaxConns is 0: as OpenMySQL's, 12
// attempts at once and 4 connections kept for Release, Renew and Inspect.
const postgresConns = 16

// OpenPostgres connects to the PostgreSQL database at url with pg's settings (see
// sqldb.OpenPostgres; a pool of 16 unless pg.MaxConns says otherwise), creates the lock
// tables in pg.Schema if needed, and returns a backend on it that owns the connection pool.
func OpenPostgres(ctx context.Context, url string, pg sqldb.PostgresConfig, cfg Config) (*Backend, error) {
	if pg.MaxConns <= 0 {
		pg.MaxConns = postgresConns
	}
	db, err := sqldb.OpenPostgres(ctx, url, pg)
	return owning(ctx, db, err, cfg)
}
