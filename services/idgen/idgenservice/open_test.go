package idgenservice_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
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

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}
