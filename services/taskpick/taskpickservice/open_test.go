package taskpickservice_test

import (
	"context"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick/taskpickservice"
)

func TestOpenBackends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := openPostgres(t)
	tests := []struct {
		name         string
		deps         service.Deps
		cfg          taskpickservice.Config
		backends     string
		def          string
		wantErrNamed string
	}{
		{name: "embedded only", backends: "sqlite", def: "sqlite"},
		{name: "shared redis", deps: service.Deps{Redis: testenv.Redis(t, "")}, backends: "redis,sqlite", def: "redis"},
		{name: "default named", deps: service.Deps{Redis: testenv.Redis(t, "")}, cfg: taskpickservice.Config{Default: "sqlite"},
			backends: "redis,sqlite", def: "sqlite"},
		{name: "shared postgres", deps: service.Deps{Postgres: pg}, backends: "postgres,sqlite", def: "postgres"},
		{name: "redis before postgres", deps: service.Deps{Redis: testenv.Redis(t, ""), Postgres: pg}, backends: "postgres,redis,sqlite", def: "redis"},
		{name: "mysql before postgres", deps: service.Deps{MySQL: openMySQL(t), Postgres: pg}, backends: "mysql,postgres,sqlite", def: "mysql"},
		{name: "postgres named", deps: service.Deps{Redis: testenv.Redis(t, ""), Postgres: pg}, cfg: taskpickservice.Config{Default: "postgres"},
			backends: "postgres,redis,sqlite", def: "postgres"},
		// An invalid setting refused at the SQLite open shows the service passes Deps' setting.
		{name: "sqlite synchronous from deps", deps: service.Deps{SQLiteSynchronous: "off"}, wantErrNamed: "--data-dir"},
		{name: "unknown default", cfg: taskpickservice.Config{Default: "etcd"}, wantErrNamed: "--task-default-backend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.deps.DataDir = t.TempDir()
			m, err := taskpickservice.Open(ctx, tt.deps, tt.cfg)
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
			if m.Path != "/"+taskpickv1connect.TaskPickServiceName+"/" {
				t.Fatalf("mounted at %q, want /%s/", m.Path, taskpickv1connect.TaskPickServiceName)
			}
			if m.Summary[1] != tt.backends || m.Summary[3] != tt.def {
				t.Fatalf("summary = %v, want backends %s, default %s", m.Summary, tt.backends, tt.def)
			}
			for name, check := range m.Checks {
				if err := check(ctx); err != nil {
					t.Fatalf("health check %s: %v", name, err)
				}
			}
			if err := m.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}

// openPostgres opens the dev PostgreSQL in a schema of the test's own.
func openPostgres(t *testing.T) *sqldb.DB {
	t.Helper()
	db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: 4})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openMySQL opens the dev MySQL (the task table there is shared; these tests add no rows).
func openMySQL(t *testing.T) *sqldb.DB {
	t.Helper()
	db, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), 4)
	if err != nil {
		t.Fatalf("open mysql: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
