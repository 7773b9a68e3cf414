package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// OpenSQLite opens (creating if needed) the SQLite database at path in WAL mode, with
// IMMEDIATE transactions (a transaction takes the write lock up front, so two instances on
// one file serialize instead of failing to upgrade) and a busy timeout.
func OpenSQLite(ctx context.Context, path string) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("sqldb: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqldb: open %s: %w", path, err)
	}
	// One connection: SQLite runs one writer at a time anyway, and this process's writers
	// then queue in Go instead of sleeping in SQLite's busy handler.
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqldb: open %s: %w", path, err)
	}
	return &DB{DB: db, Dialect: SQLite}, nil
}

// OpenMySQL connects to the MySQL or MariaDB database in dsn (go-sql-driver format, e.g.
// user:pass@tcp(host:3306)/coordkit).
func OpenMySQL(ctx context.Context, dsn string) (*DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqldb: mysql dsn: %w", err)
	}
	// Fail fast on a database that is down: reservations run in the background ahead of need,
	// and a request that must wait is better answered unavailable than left hanging.
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
		return nil, fmt.Errorf("sqldb: mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	// Reservations are rare (one per segment) and short: a few connections per instance.
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxLifetime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqldb: mysql %s: %w", cfg.Addr, err)
	}
	return &DB{DB: db, Dialect: MySQL}, nil
}

// driverLog sends the driver's messages to slog at debug instead of stderr.
type driverLog struct{}

// Print implements mysql.Logger.
func (driverLog) Print(v ...any) { slog.Debug("mysql driver", "msg", fmt.Sprint(v...)) }
