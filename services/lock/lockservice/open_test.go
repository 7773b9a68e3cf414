package lockservice_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock/lockservice"
	"github.com/coordkit/coordkit/services/lock/sqllock"
)

func TestOpenBackends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mysql, err := sqldb.OpenMySQL(ctx, testenv.MySQLDSN(), 8)
	if err != nil {
		t.Fatalf("open mysql (start it with deploy/dev/backends.sh up): %v", err)
	}
	scope := testenv.Prefix(t)
	if len(scope) > 64 {
		scope = scope[len(scope)-64:]
	}
	t.Cleanup(func() {
		sqllock.DropScope(context.Background(), mysql.DB, scope) //nolint:errcheck // best effort
		mysql.Close()
	})
	pg, err := sqldb.OpenPostgres(ctx, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: 8})
	if err != nil {
		t.Fatalf("open postgres (start it with deploy/dev/backends.sh up): %v", err)
	}
	t.Cleanup(func() { pg.Close() })
	var nilClient *redis.Client
	tests := []struct {
		name         string
		deps         service.Deps
		cfg          lockservice.Config
		backends     string
		def          string
		wantErrNamed string
	}{
		{name: "embedded only", backends: "sqlite", def: "sqlite"},
		{name: "nil redis client", deps: service.Deps{Redis: nilClient}, backends: "sqlite", def: "sqlite"},
		{name: "shared redis", deps: service.Deps{Redis: testenv.Redis(t, "")}, backends: "redis,sqlite", def: "redis"},
		{name: "shared mysql", deps: service.Deps{MySQL: mysql}, cfg: lockservice.Config{Scope: scope},
			backends: "mysql,sqlite", def: "mysql"},
		{name: "default named", deps: service.Deps{MySQL: mysql}, cfg: lockservice.Config{Scope: scope, Default: "sqlite"},
			backends: "mysql,sqlite", def: "sqlite"},
		{name: "shared postgres", deps: service.Deps{Postgres: pg}, cfg: lockservice.Config{Scope: scope},
			backends: "postgres,sqlite", def: "postgres"},
		{name: "mysql before postgres", deps: service.Deps{MySQL: mysql, Postgres: pg}, cfg: lockservice.Config{Scope: scope},
			backends: "mysql,postgres,sqlite", def: "mysql"},
		{name: "unknown default", cfg: lockservice.Config{Default: "etcd"}, wantErrNamed: "--default-backend"},
		// An invalid setting refused at the SQLite open shows the service passes Deps' setting.
		{name: "sqlite synchronous from deps", deps: service.Deps{SQLiteSynchronous: "off"}, wantErrNamed: "--data-dir"},
		{name: "redlock down", cfg: lockservice.Config{RedlockAddrs: []string{"127.0.0.1:1"}}, wantErrNamed: "--redlock-addrs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.deps.DataDir = t.TempDir()
			m, err := lockservice.Open(ctx, tt.deps, tt.cfg)
			if tt.wantErrNamed != "" {
				if err == nil {
					m.Close()
					t.Fatalf("Open succeeded, want an error naming %s", tt.wantErrNamed)
				}
				if !strings.Contains(err.Error(), tt.wantErrNamed) {
					t.Fatalf("Open error = %v, want one naming %s", err, tt.wantErrNamed)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if m.Path != "/"+lockv1connect.LockServiceName+"/" {
				t.Fatalf("mounted at %q, want /%s/", m.Path, lockv1connect.LockServiceName)
			}
			want := []any{"lock_backends", tt.backends, "default", tt.def}
			if len(m.Summary) != len(want) || m.Summary[1] != want[1] || m.Summary[3] != want[3] {
				t.Fatalf("summary = %v, want %v", m.Summary, want)
			}
			if err := m.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			for _, db := range []*sqldb.DB{mysql, pg} {
				if err := db.PingContext(ctx); err != nil {
					t.Fatalf("shared %s pool after Close: %v, want it still open", db.Dialect.Name, err)
				}
			}
		})
	}
}
