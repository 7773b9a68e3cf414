package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-sql-driver/mysql"
)

// OpenMySQL connects to the MySQL or MariaDB database in dsn (go-sql-driver format, e.g.
// user:pass@tcp(host:3306)/coordkit), creates the lock table if needed, and returns a backend
// on it, in scope (DefaultScope when empty), that owns the connection pool.
func OpenMySQL(ctx context.Context, dsn, scope string) (*Backend, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqllock: mysql dsn: %w", err)
	}
	// Fail fast instead of hanging on a database that is down: the service answers
	// unavailable and the caller retries.
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 10 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = driverLog{}
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("sqllock: mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	// A lock transaction takes about a millisecond, so 16 connections carry thousands of
	// operations per second per instance while leaving room under max_connections (151 by
	// default) for many instances.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	db.SetConnMaxLifetime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqllock: mysql %s: %w", cfg.Addr, err)
	}
	b, err := New(ctx, db, MySQL, scope)
	if err != nil {
		db.Close()
		return nil, err
	}
	b.ownsDB = true
	return b, nil
}

// driverLog sends the driver's messages (mostly "closing bad idle connection" after a
// database restart, which database/sql recovers from) to slog at debug instead of stderr.
type driverLog struct{}

// Print implements mysql.Logger.
func (driverLog) Print(v ...any) { slog.Debug("mysql driver", "msg", fmt.Sprint(v...)) }
