package idgen_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/idgenservice"
)

// storeCase is one SQL store under test; open returns the setup of a fresh, isolated store
// that several instances share, as several processes would.
type storeCase struct {
	name string
	open func(t *testing.T) setup
}

// setup is what an instance opens with: the connections and the ID service's Config.
type setup struct {
	deps service.Deps
	cfg  idgenservice.Config
}

var stores = []storeCase{
	{name: "mysql", open: func(t *testing.T) setup {
		db, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), 8)
		if err != nil {
			t.Fatalf("open mysql (start it with deploy/dev/backends.sh up): %v", err)
		}
		t.Cleanup(func() { db.Close() }) // registered first: runs after every instance stopped
		return setup{deps: service.Deps{MySQL: db}}
	}},
	{name: "sqlite", open: func(t *testing.T) setup { return sqliteSetup(t) }},
	{name: "postgres", open: func(t *testing.T) setup {
		db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: 8})
		if err != nil {
			t.Fatalf("open postgres (start it with deploy/dev/backends.sh up): %v", err)
		}
		t.Cleanup(func() { db.Close() }) // registered first: runs after every instance stopped
		return setup{deps: service.Deps{Postgres: db}}
	}},
}

// sqliteSetup is a fresh embedded store, in a directory of the test's own.
func sqliteSetup(t testing.TB) setup { return setup{deps: service.Deps{DataDir: t.TempDir()}} }

// withRedis adds the test Redis, under a key prefix of this test, to s.
func withRedis(t testing.TB, s setup) setup {
	rdb := testenv.Redis(t, "")
	prefix := testenv.Prefix(t) + ":"
	testenv.CleanRedis(t, rdb, prefix)
	s.deps.Redis, s.cfg.RedisPrefix = rdb, prefix
	return s
}

// instance is one running ID service with a client for it.
type instance struct {
	url    string
	client idgenv1connect.IdServiceClient
	// stop shuts the service down as SIGTERM would and closes its engines; later calls
	// return the first result.
	stop func() error
}

// startInstance opens the ID service on s and serves it through the real server bootstrap
// on a loopback port, as `coord serve` does, until stop or the end of the test.
func startInstance(t testing.TB, s setup) *instance {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := server.New(server.Config{Logger: logger})
	s.deps.Registerer, s.deps.Logger = srv.Registry(), logger
	svc, closeSvc, err := idgenservice.OpenService(context.Background(), s.deps, s.cfg)
	if err != nil {
		t.Fatalf("idgenservice.OpenService: %v", err)
	}
	srv.Handle(idgenv1connect.NewIdServiceHandler(svc, srv.HandlerOptions()...))
	url, stopServer := testenv.Serve(t, srv)
	stop := sync.OnceValue(func() error {
		return errors.Join(stopServer(), closeSvc())
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return &instance{url: url, client: idgenv1connect.NewIdServiceClient(client.DefaultHTTPClient(), url), stop: stop}
}

// wantCode fails unless err carries the Connect code want and its message starts with the
// field it is about.
func wantCode(t *testing.T, err error, want connect.Code, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v naming %q", want, field)
	}
	if got := connect.CodeOf(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || !strings.HasPrefix(ce.Message(), field+":") {
		t.Fatalf("error %v does not start with the field %q", err, field)
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}
