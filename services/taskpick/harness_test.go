package taskpick_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/redistask"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// backendCase is one task engine under test: store makes a fresh store on the real engine
// and returns a function that opens one more backend on it, as another process would.
// Adding a backend to every behaviour is one line in backends.
type backendCase struct {
	name  string
	store func(t *testing.T) (open func(t *testing.T) taskpick.Backend)
}

var backends = []backendCase{
	{name: "redis", store: redisStore},
	{name: "mysql", store: mysqlStore},
	{name: "postgres", store: postgresStore},
	{name: "sqlite", store: sqliteStore},
}

// backendNamed is the row of backends named name.
func backendNamed(name string) backendCase {
	for _, b := range backends {
		if b.name == name {
			return b
		}
	}
	panic("no backend row " + name)
}

func redisStore(t *testing.T) func(t *testing.T) taskpick.Backend {
	prefix := testenv.Prefix(t)
	testenv.CleanRedis(t, testenv.Redis(t, ""), prefix)
	return func(t *testing.T) taskpick.Backend {
		rdb := testenv.Redis(t, "")
		return redistask.New(rdb, redistask.Config{Prefix: prefix, Scripts: redisconf.Pipelined(rdb)}) // as taskpickservice.Open wires it
	}
}

func sqliteStore(t *testing.T) func(t *testing.T) taskpick.Backend {
	path := filepath.Join(t.TempDir(), "tasks.db")
	return func(t *testing.T) taskpick.Backend {
		b, err := sqltask.OpenSQLite(context.Background(), path, sqltask.Config{})
		if err != nil {
			t.Fatalf("open sqlite: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
}

// mysqlStore shares the dev database's table; tests stay apart by their pool names (see
// pool), and the rows of this test's pools are deleted when it ends.
func mysqlStore(t *testing.T) func(t *testing.T) taskpick.Backend {
	prefix := testenv.Prefix(t)
	t.Cleanup(func() {
		db, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), 1)
		if err == nil {
			db.Exec("DELETE FROM coordkit_tasks WHERE pool LIKE ?", prefix+"%")          //nolint:errcheck // best effort
			db.Exec("DELETE FROM coordkit_task_pools WHERE pool LIKE ?", prefix+"%")     //nolint:errcheck // best effort
			db.Exec("DELETE FROM coordkit_task_schedules WHERE pool LIKE ?", prefix+"%") //nolint:errcheck // best effort
			db.Close()
		}
	})
	return func(t *testing.T) taskpick.Backend {
		db, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), 16)
		if err != nil {
			t.Fatalf("open mysql (start it with deploy/dev/backends.sh up): %v", err)
		}
		t.Cleanup(func() { db.Close() })
		return sqlBackend(t, db)
	}
}

// postgresStore is a schema of the test's own (dropped when it ends) in the dev database.
func postgresStore(t *testing.T) func(t *testing.T) taskpick.Backend {
	schema := testenv.PostgresSchema(t)
	return func(t *testing.T) taskpick.Backend {
		db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 16})
		if err != nil {
			t.Fatalf("open postgres (start it with deploy/dev/backends.sh up): %v", err)
		}
		t.Cleanup(func() { db.Close() })
		return sqlBackend(t, db)
	}
}

// sqlBackend is a sqltask backend on db, closed when the test ends.
func sqlBackend(t *testing.T, db *sqldb.DB) taskpick.Backend {
	b, err := sqltask.New(context.Background(), db, sqltask.Config{})
	if err != nil {
		t.Fatalf("sqltask: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// pool names a pool unique to the test run, so tests sharing a database never meet.
func pool(t *testing.T, name string) string { return testenv.Prefix(t) + ":" + name }

// testSweep is the sweep interval of test instances: recovery follows an expiry fast.
const testSweep = 50 * time.Millisecond

// instance is one running task service with a client for it.
type instance struct {
	svc    *taskpick.Service
	client taskpickv1connect.TaskPickServiceClient
	url    string
}

// startInstance serves a task service on b (as backend name) through the real server
// bootstrap on a loopback port, with events on bus when it is not nil.
func startInstance(t *testing.T, name string, b taskpick.Backend, bus *event.Bus, tweak ...func(*taskpick.Config)) *instance {
	t.Helper()
	srv := server.New(server.Config{Logger: quietLog})
	cfg := taskpick.Config{Backends: map[string]taskpick.Backend{name: b}, Events: bus, SweepInterval: testSweep,
		Registerer: srv.Registry(), Logger: quietLog}
	for _, f := range tweak {
		f(&cfg)
	}
	svc, err := taskpick.NewService(cfg)
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	t.Cleanup(func() { svc.Close() })
	srv.Handle(taskpickv1connect.NewTaskPickServiceHandler(svc, srv.HandlerOptions()...))
	url, _ := testenv.Serve(t, srv)
	return &instance{svc: svc, url: url, client: taskpickv1connect.NewTaskPickServiceClient(http.DefaultClient, url)}
}

// embeddedBus starts an in-process NATS for the test.
func embeddedBus(t *testing.T) *event.Bus {
	t.Helper()
	bus, err := event.Open(context.Background(), event.Config{Logger: quietLog})
	if err != nil {
		t.Fatalf("event.Open: %v", err)
	}
	t.Cleanup(func() { bus.Close() })
	return bus
}

// quietLog drops the logs of test instances.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))
