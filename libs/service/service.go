package service

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"reflect"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/sqldb"
)

// Deps are the connections and settings a process opens once and every service shares. A
// service that needs a missing one either works without it (no events, no Redis backend) or
// fails Open with an error naming the flag that provides it.
type Deps struct {
	// Logger is the process's logger; default slog.Default().
	Logger *slog.Logger
	// Registerer receives every service's metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// HandlerOptions are the options every Connect handler is built with (the server's
	// interceptors, limits and recovery).
	HandlerOptions []connect.HandlerOption
	// Events is the NATS bus; nil means no events (waiters poll).
	Events *event.Bus
	// Redis is the shared Redis client; nil when none is configured.
	Redis redis.UniversalClient
	// MySQL is the shared MySQL/MariaDB pool; nil when none is configured.
	MySQL *sqldb.DB
	// Postgres is the shared PostgreSQL pool; nil when none is configured.
	Postgres *sqldb.DB
	// DataDir holds the embedded SQLite files, one per service.
	DataDir string
	// SQLiteSynchronous is how the embedded SQLite files sync their commits (OpenSQLite);
	// the zero value is sqldb.SyncFull.
	SQLiteSynchronous sqldb.Synchronous
}

// Log is d.Logger or slog.Default().
func (d Deps) Log() *slog.Logger {
	if d.Logger == nil {
		return slog.Default()
	}
	return d.Logger
}

// RedisClient is d.Redis, or nil when there is none: also when the field holds a nil
// pointer (a nil *redis.Client stored in the interface is not a nil interface), so a
// service can test the result against nil.
func (d Deps) RedisClient() redis.UniversalClient {
	if d.Redis == nil {
		return nil
	}
	if v := reflect.ValueOf(d.Redis); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return d.Redis
}

// SQLitePath is the path of the embedded SQLite file called name in DataDir.
func (d Deps) SQLitePath(name string) string { return filepath.Join(d.DataDir, name) }

// OpenSQLite opens the embedded SQLite file called name in DataDir with the process's
// settings (SQLiteSynchronous): the one way a service opens its file. The caller owns the
// handle and closes it after what runs on it.
func (d Deps) OpenSQLite(ctx context.Context, name string, opts ...sqldb.SQLiteOption) (*sqldb.DB, error) {
	return sqldb.OpenSQLite(ctx, d.SQLitePath(name), append([]sqldb.SQLiteOption{sqldb.WithSynchronous(d.SQLiteSynchronous)}, opts...)...)
}

// Mounted is an opened service: the Connect handler to mount at Path (as returned by the
// generated NewXServiceHandler) and Close, which stops its background work and closes what
// Open opened (never Deps: the process closes those after every service).
type Mounted struct {
	// Path is the handler's route prefix, "/coordkit.x.v1.XService/".
	Path string
	// Handler serves the service's procedures.
	Handler http.Handler
	// Close releases what Open opened, in reverse order.
	Close func() error
	// Summary is one line for the startup log, such as the enabled backends.
	Summary []any
	// Checks are cheap round trips to each backend the service uses, by backend name, for
	// gRPC health and /readyz: the service is SERVING while every one answers.
	Checks map[string]server.Check
}

// Mount is what the server mounts for m, named name.
func (m *Mounted) Mount(name string) server.Mount {
	return server.Mount{Name: name, Path: m.Path, Handler: m.Handler, Checks: m.Checks, Summary: m.Summary}
}

// Closers closes what was opened, last opened first; the zero value is ready to use.
type Closers struct{ fns []func() error }

// Add registers close to run at Close.
func (c *Closers) Add(close func() error) { c.fns = append(c.fns, close) }

// Close runs every registered function once, last added first, and returns their errors
// joined. Later calls do nothing.
func (c *Closers) Close() error {
	var err error
	for i := len(c.fns) - 1; i >= 0; i-- {
		err = errors.Join(err, c.fns[i]())
	}
	c.fns = nil
	return err
}

// Fail closes what was opened and returns err joined with any close error: the error path of
// an Open.
func (c *Closers) Fail(err error) error { return errors.Join(err, c.Close()) }
