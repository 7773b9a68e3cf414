// Package sqldb opens the SQL databases coordkit keeps state in, with the settings every
// service needs: SQLite in WAL mode with IMMEDIATE transactions for the embedded default, and
// MySQL/MariaDB that fails fast when the server is down. Dialect holds the few fragments
// where the two differ, so every service writes its SQL once.
package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite"

	"github.com/coordkit/coordkit/libs/clock"
)

// OpenSQLite opens (creating if needed) the SQLite database at path in WAL mode, with
// IMMEDIATE transactions (a transaction takes the write lock up front, so two processes on one
// file serialize instead of failing to upgrade a read lock) and a 10s busy timeout. It keeps
// one connection: SQLite runs one writer at a time anyway, and this process's writers then
// queue in Go instead of sleeping in SQLite's busy handler.
//
// Commits are durable: synchronous=FULL makes every commit sync the write-ahead log before
// it returns, so a commit that was acknowledged survives a power loss or a kernel crash (in
// WAL mode NORMAL syncs only at checkpoints, and the last commits before a crash can roll
// back: a segment's max_id, a fence floor, a Put). WithSynchronous(SyncNormal) trades that
// for speed (docs/benchmarks.md has the cost).
//
// Dialect.NowMillis reads the database's own clock function, coordkit_now_ms(), which this
// handle registers on its connections: the process's clock.Steady (clock.Process unless
// WithClock says otherwise), so that a step of the wall clock never moves a lease.
//
// The data is the service's alone: missing directories are created 0700 and the database
// 0600, and SQLite gives its -wal and -shm files the database's mode. A database file (or
// -wal, -shm) that others may read, as versions before this one created them, is narrowed to
// 0600 with a warning; a directory that others may enter is only warned about, since it may
// be shared (a home directory, the working directory).
func OpenSQLite(ctx context.Context, path string, opts ...SQLiteOption) (*DB, error) {
	o := sqliteOptions{clock: clock.Process(), markEvery: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	syncMode, err := ParseSynchronous(string(o.synchronous))
	if err != nil {
		return nil, err
	}
	if err := prepareSQLiteFiles(path); err != nil {
		return nil, fmt.Errorf("sqldb: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+string(syncMode)+")")
	q.Set("_txlock", "immediate")
	// A driver of this handle's own carries its clock function; database/sql opens every
	// connection of the pool through it, each with the pragmas above.
	drv := &sqlite.Driver{}
	now := o.clock
	if err := drv.RegisterScalarFunction(nowFunction, 0, func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
		return now.UnixMilli(), nil
	}); err != nil {
		return nil, fmt.Errorf("sqldb: open %s: %w", path, err)
	}
	db := sql.OpenDB(sqliteConnector{drv: drv, dsn: "file:" + path + "?" + q.Encode()})
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqldb: open %s: %w", path, err)
	}
	out := &DB{DB: db, Dialect: SQLite, Clock: o.clock}
	if err := out.startClockMarks(ctx, o.markEvery); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqldb: open %s: %w", path, err)
	}
	return out, nil
}

// nowFunction is the SQL function OpenSQLite's handles read their clock with.
const nowFunction = "coordkit_now_ms"

// Synchronous is how a SQLite database syncs its commits: SyncFull (the zero value means it
// too) or SyncNormal. ParseSynchronous reads it from a flag.
type Synchronous string

// The synchronous modes OpenSQLite accepts.
const (
	// SyncFull syncs the write-ahead log at every commit: an acknowledged commit survives a
	// power loss or a kernel crash. The default.
	SyncFull Synchronous = "FULL"
	// SyncNormal syncs only at checkpoints: a power loss or kernel crash can roll back the
	// last acknowledged commits. Only for stores that may lose them (benchmarks comparing
	// the two).
	SyncNormal Synchronous = "NORMAL"
)

// ParseSynchronous reads a synchronous mode: "full" ("" means it too) or "normal", in any
// case. Other values are an error: a typo never silently means either.
func ParseSynchronous(mode string) (Synchronous, error) {
	switch m := strings.ToUpper(strings.TrimSpace(mode)); m {
	case "", "FULL":
		return SyncFull, nil
	case "NORMAL":
		return SyncNormal, nil
	default:
		return "", fmt.Errorf("sqldb: SQLite synchronous %q: want full or normal", mode)
	}
}

// WithSynchronous sets how the database syncs its commits (default SyncFull; "" means it
// too). A value ParseSynchronous did not return is refused at OpenSQLite.
func WithSynchronous(s Synchronous) SQLiteOption {
	return func(o *sqliteOptions) { o.synchronous = s }
}

// SQLiteOption configures OpenSQLite.
type SQLiteOption func(*sqliteOptions)

type sqliteOptions struct {
	clock       *clock.Steady
	markEvery   time.Duration
	synchronous Synchronous
}

// WithClock sets the clock the database's coordkit_now_ms() reads (default clock.Process):
// tests step a clock.Fake under it.
func WithClock(c *clock.Steady) SQLiteOption { return func(o *sqliteOptions) { o.clock = c } }

// sqliteConnector opens connections to dsn through drv.
type sqliteConnector struct {
	drv *sqlite.Driver
	dsn string
}

// Connect implements driver.Connector.
func (c sqliteConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.drv.Open(c.dsn)
}

// Driver implements driver.Connector.
func (c sqliteConnector) Driver() driver.Driver { return c.drv }

// Modes of what OpenSQLite creates.
const (
	// DirMode is the mode of the data directories OpenSQLite creates.
	DirMode os.FileMode = 0o700
	// FileMode is the mode of SQLite database files.
	FileMode os.FileMode = 0o600
)

// warnedDirs are the open data directories already warned about: once per process each, not
// once per database in them.
var warnedDirs sync.Map

// prepareSQLiteFiles creates path's directory (DirMode) and an empty database file (FileMode)
// when missing, so that SQLite, which creates its files with the process umask's mode (0644
// usually) and its -wal and -shm files with the database's, never makes a readable one.
// Files left readable by others are narrowed; a readable directory is warned about.
func prepareSQLiteFiles(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, DirMode); err != nil {
			return err
		}
	case err != nil:
		return err
	case st.Mode().Perm()&0o077 != 0:
		if _, warned := warnedDirs.LoadOrStore(dir, true); warned {
			break
		}
		slog.Warn("sqldb: other users can enter the SQLite data directory; restrict it (chmod 700)",
			"dir", dir, "mode", st.Mode().Perm().String())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, FileMode)
	if err != nil {
		return err
	}
	f.Close()
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if st.Mode().Perm()&^FileMode == 0 {
			continue
		}
		if err := os.Chmod(name, FileMode); err != nil {
			slog.Warn("sqldb: a SQLite file can be read by other users and could not be restricted",
				"file", name, "mode", st.Mode().Perm().String(), "error", err)
			continue
		}
		slog.Warn("sqldb: restricted a SQLite file that other users could read",
			"file", name, "was", st.Mode().Perm().String(), "now", FileMode.String())
	}
	return nil
}

// OpenMySQL connects to the MySQL or MariaDB database in dsn (go-sql-driver format, e.g.
// user:pass@tcp(host:3306)/coordkit) with at most maxConns connections. Unless the DSN says
// otherwise it dials within 2s, reads and writes within 10s (a database that is down is
// answered unavailable fast instead of hanging callers), and runs its sessions in UTC.
func OpenMySQL(ctx context.Context, dsn string, maxConns int) (*DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqldb: mysql dsn: %w", err)
	}
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
	// The services read the database clock with UNIX_TIMESTAMP(NOW(3)); in a session time
	// zone with daylight saving that is ambiguous for an hour a year, and leases would jump.
	if _, ok := cfg.Params["time_zone"]; !ok {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["time_zone"] = "'+00:00'"
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("sqldb: mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxLifetime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqldb: mysql %s: %w", cfg.Addr, err)
	}
	return &DB{DB: db, Dialect: MySQL}, nil
}

// driverLog sends the driver's messages (mostly "closing bad idle connection" after a
// database restart, which database/sql recovers from) to slog at debug instead of stderr.
type driverLog struct{}

// Print implements mysql.Logger.
func (driverLog) Print(v ...any) { slog.Debug("mysql driver", "msg", fmt.Sprint(v...)) }
