package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/spf13/pflag"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/lock/lockservice"
)

// serveConfig is the part of `coord serve`'s flags the bench sets on the services it starts.
type serveConfig struct {
	addr         string
	dataDir      string
	redisAddr    string
	redlockAddrs string
	zkAddrs      string
	mysqlDSN     string
	pgURL        string
	pgSchema     string // the schema of the service's PostgreSQL tables; empty: coord's default
	lockScope    string
	logLevel     string
	logFormat    string
	sqliteSync   string
}

// coordFlag adds --coord, the coord binary the bench runs as `coord serve`, to fs.
func coordFlag(fs *pflag.FlagSet, path *string) {
	fs.StringVar(path, "coord", "", "the coord binary to run as coord serve; empty builds it from this repository with go build (run from inside the repository)")
}

// builtCoord is the coord binary built once per process for an empty --coord; tests set
// defaultCoord instead.
var (
	builtMu      sync.Mutex
	builtCoord   string
	defaultCoord string
)

// coordBinary returns path, or when it is empty a coord built from the repository around
// the working directory (once per process; removed by removeBuiltCoord).
func coordBinary(ctx context.Context, path string) (string, error) {
	if path != "" {
		return path, nil
	}
	if defaultCoord != "" {
		return defaultCoord, nil
	}
	builtMu.Lock()
	defer builtMu.Unlock()
	if builtCoord != "" {
		return builtCoord, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "coordbench-coord-")
	if err != nil {
		return "", fmt.Errorf("bench: --coord: %w", err)
	}
	exe := filepath.Join(dir, "coord")
	build := exec.CommandContext(ctx, "go", "build", "-o", exe, "./cmd/coord")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", errors.Join(fmt.Errorf("bench: --coord: go build ./cmd/coord in %s: %w: %s", root, err, out), os.RemoveAll(dir))
	}
	builtCoord = exe
	return exe, nil
}

// removeBuiltCoord removes the coord that coordBinary built, if any.
func removeBuiltCoord() {
	builtMu.Lock()
	defer builtMu.Unlock()
	if builtCoord != "" {
		os.RemoveAll(filepath.Dir(builtCoord)) //nolint:errcheck // a temporary file
		builtCoord = ""
	}
}

// repoRoot is the nearest directory at or above the working directory that holds
// cmd/coord/go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("bench: --coord: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "cmd", "coord", "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("bench: --coord: not inside the coordkit repository (no cmd/coord above the working directory): give --coord PATH")
		}
		dir = parent
	}
}

// mysqlConns and postgresConns are the pools of the in-process lock service, as coord
// serve's.
const mysqlConns, postgresConns = 32, 32

// postgresURLFlag adds --postgres-url, the database of service/postgres, to fs.
func postgresURLFlag(fs *pflag.FlagSet, url *string) {
	fs.StringVar(url, "postgres-url", "postgres://postgres@127.0.0.1:5432/coordkit?sslmode=disable&options=-c%20synchronous_commit%3Don", "PostgreSQL for service/postgres (its locks in a schema of the run's own, dropped after it)")
}

// startService starts the lock service in this process on a loopback port, from the lock
// service's package as coord serve opens it (without events: waiters poll, which the
// acquire+release pairs measured never do), and returns its base URL and the function that
// shuts it down.
func startService(ctx context.Context, scfg serveConfig) (string, func() error, error) {
	var closers service.Closers
	sqliteSync, err := sqldb.ParseSynchronous(scfg.sqliteSync)
	if err != nil {
		return "", nil, fmt.Errorf("bench: --sqlite-synchronous: %w", err)
	}
	logger := slog.New(slog.DiscardHandler)
	srv := server.New(server.Config{Logger: logger})
	deps := service.Deps{Logger: srv.Logger(), Registerer: srv.Registry(), HandlerOptions: srv.HandlerOptions(), DataDir: scfg.dataDir, SQLiteSynchronous: sqliteSync}
	if scfg.redisAddr != "" {
		rdb, err := redisconf.Open(ctx, redisconf.Config{Addr: scfg.redisAddr})
		if err != nil {
			return "", nil, fmt.Errorf("bench: --redis-addr %s: %w", scfg.redisAddr, err)
		}
		closers.Add(rdb.Close)
		deps.Redis = rdb
	}
	if scfg.mysqlDSN != "" {
		db, err := sqldb.OpenMySQL(ctx, scfg.mysqlDSN, mysqlConns)
		if err != nil {
			return "", nil, closers.Fail(fmt.Errorf("bench: --mysql-dsn: %w", err))
		}
		closers.Add(db.Close)
		deps.MySQL = db
	}
	if scfg.pgURL != "" {
		db, err := sqldb.OpenPostgres(ctx, scfg.pgURL, sqldb.PostgresConfig{Schema: scfg.pgSchema, MaxConns: postgresConns})
		if err != nil {
			return "", nil, closers.Fail(fmt.Errorf("bench: --postgres-url: %w", err))
		}
		closers.Add(db.Close)
		deps.Postgres = db
	}
	m, err := lockservice.Open(ctx, deps, lockservice.Config{
		RedlockAddrs: splitList(scfg.redlockAddrs), ZooKeeperAddrs: splitList(scfg.zkAddrs), Scope: scfg.lockScope,
	})
	if err != nil {
		return "", nil, closers.Fail(fmt.Errorf("bench: start service: %w", err))
	}
	closers.Add(m.Close)
	srv.Mount(m.Mount("lock"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, closers.Fail(fmt.Errorf("bench: %w", err))
	}
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(serveCtx, ln) }()
	stop := func() error {
		cancel()
		err := <-errc
		if err != nil {
			err = fmt.Errorf("bench: service: %w", err)
		}
		return errors.Join(err, closers.Close())
	}
	return "http://" + ln.Addr().String(), stop, nil
}
