package idgenservice_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/idgenservice"
)

// TestOpenSharedDB checks that a service on a shared database leaves it open when it closes:
// the process closes it after every service.
func TestOpenSharedDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqldb.OpenSQLite(ctx, filepath.Join(t.TempDir(), "shared.db"))
	noErr(t, err)
	t.Cleanup(func() { db.Close() })

	m, err := idgenservice.Open(ctx, service.Deps{MySQL: db, DataDir: t.TempDir()}, idgenservice.Config{})
	noErr(t, err)
	if m.Path != "/"+idgenv1connect.IdServiceName+"/" || m.Handler == nil {
		t.Fatalf("mounted at %q (handler %v), want /%s/", m.Path, m.Handler, idgenv1connect.IdServiceName)
	}
	noErr(t, m.Close())
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("shared database after Close: %v, want it still open", err)
	}
	var n int
	noErr(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM coordkit_idgen_workers").Scan(&n))
	if n == 0 {
		t.Fatal("worker-id table is empty, want the service to have used the shared database")
	}
}

func TestOpenConfigErrors(t *testing.T) {
	t.Parallel()
	var nilClient *redis.Client // as a caller without Redis might pass it
	both := service.Deps{MySQL: openMySQL(t), Postgres: openPostgres(t, testenv.PostgresSchema(t))}
	tests := []struct {
		name string
		deps service.Deps
		cfg  idgenservice.Config
		want string
	}{
		{"leases on redis without redis", service.Deps{}, idgenservice.Config{WorkerLeases: idgenservice.LeasesRedis}, "--redis-addr"},
		{"leases on a nil redis client", service.Deps{Redis: nilClient}, idgenservice.Config{WorkerLeases: idgenservice.LeasesRedis}, "--redis-addr"},
		// An invalid setting refused at the SQLite open shows the service passes Deps' setting.
		{"sqlite synchronous from deps", service.Deps{SQLiteSynchronous: "off"}, idgenservice.Config{}, "--data-dir"},
		{"unknown lease store", service.Deps{}, idgenservice.Config{WorkerLeases: "etcd"}, "--id-worker-leases"},
		{"unknown store", service.Deps{}, idgenservice.Config{Store: "etcd"}, "--id-store"},
		{"auto with mysql and postgres", both, idgenservice.Config{}, "--id-store"},
		{"auto spelled out with mysql and postgres", both, idgenservice.Config{Store: idgenservice.StoreAuto}, "--id-store"},
		{"mysql store without mysql", service.Deps{Postgres: both.Postgres}, idgenservice.Config{Store: idgenservice.StoreMySQL}, "--mysql-dsn"},
		{"postgres store without postgres", service.Deps{MySQL: both.MySQL}, idgenservice.Config{Store: idgenservice.StorePostgres}, "--postgres-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.deps.DataDir = t.TempDir()
			m, err := idgenservice.Open(context.Background(), tt.deps, tt.cfg)
			if err == nil {
				m.Close()
				t.Fatalf("Open succeeded, want an error naming %s", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open error = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// TestOpenStore checks which SQL database each --id-store setting keeps the ID tables in,
// and that the summary and the health check name it.
func TestOpenStore(t *testing.T) {
	t.Parallel()
	mysqlDB := openMySQL(t)
	tests := []struct {
		name     string
		mysql    bool
		postgres bool
		store    string
		want     string
	}{
		{name: "auto, no database", want: "sqlite"},
		{name: "auto, mysql", mysql: true, want: "mysql"},
		{name: "auto, postgres", postgres: true, want: "postgres"},
		{name: "postgres of both", mysql: true, postgres: true, store: idgenservice.StorePostgres, want: "postgres"},
		{name: "mysql of both", mysql: true, postgres: true, store: idgenservice.StoreMySQL, want: "mysql"},
		{name: "sqlite next to postgres", postgres: true, store: idgenservice.StoreSQLite, want: "sqlite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			deps := service.Deps{DataDir: t.TempDir()}
			if tt.mysql {
				deps.MySQL = mysqlDB
			}
			if tt.postgres {
				deps.Postgres = openPostgres(t, testenv.PostgresSchema(t))
			}
			m, err := idgenservice.Open(ctx, deps, idgenservice.Config{Store: tt.store})
			noErr(t, err)
			defer m.Close()
			if got := summary(m.Summary, "id_store"); got != tt.want {
				t.Fatalf("summary id_store = %v, want %s", got, tt.want)
			}
			check, ok := m.Checks[tt.want]
			if !ok {
				t.Fatalf("health checks %v, want one named %s", keys(m.Checks), tt.want)
			}
			noErr(t, check(ctx))
			if tt.want != "postgres" || deps.Postgres == nil {
				return
			}
			var held int
			noErr(t, deps.Postgres.QueryRowContext(ctx, "SELECT COUNT(*) FROM coordkit_idgen_workers WHERE owner <> ''").Scan(&held))
			if held != 1 {
				t.Fatalf("%d worker ids held in the postgres schema, want 1: the service's", held)
			}
		})
	}
}

// TestOpenTogetherOnPostgres starts several instances at the same moment on one fresh
// PostgreSQL schema, as a deployment's pods do: every one opens (the tables are created
// once, whoever wins), each with a worker id of its own.
func TestOpenTogetherOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	const instances = 5
	errs := make([]error, instances)
	var wg sync.WaitGroup
	for i := range instances {
		db := openPostgres(t, schema)
		wg.Go(func() {
			m, err := idgenservice.Open(ctx, service.Deps{Postgres: db, DataDir: t.TempDir()}, idgenservice.Config{})
			if err == nil {
				t.Cleanup(func() { m.Close() })
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("instance %d: Open = %v", i, err)
		}
	}
	var held, ids int
	db := openPostgres(t, schema)
	noErr(t, db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT worker_id) FROM coordkit_idgen_workers WHERE owner <> ''").Scan(&held, &ids))
	if held != instances || ids != instances {
		t.Fatalf("%d leases on %d worker ids, want %d on as many", held, ids, instances)
	}
}

func openMySQL(t testing.TB) *sqldb.DB {
	t.Helper()
	db, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), 8)
	noErr(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(t testing.TB, schema string) *sqldb.DB {
	t.Helper()
	db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 4})
	noErr(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// summary is the value after key in a Mounted's Summary.
func summary(kv []any, key string) any {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			return kv[i+1]
		}
	}
	return nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}
