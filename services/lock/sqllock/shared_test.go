package sqllock

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestNewOnSharedPool checks a backend on a pool the process shares with other services: it
// bounds its TryAcquires by the pool's size, at most 12 however large the pool, and leaves
// the pool open when it closes.
func TestNewOnSharedPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	scope := strings.TrimPrefix(testenv.Prefix(t), "test:")
	if len(scope) > 64 {
		scope = scope[len(scope)-64:]
	}
	sqlite, err := sqldb.OpenSQLite(ctx, filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { sqlite.Close() })
	tests := []struct {
		name  string
		open  func(t *testing.T) *sqldb.DB
		slots int
	}{
		{"sqlite, one connection", func(*testing.T) *sqldb.DB { return sqlite }, 0},
		{"mysql, 8 connections", func(t *testing.T) *sqldb.DB { return openMySQLPool(t, scope, 8) }, 4},
		{"mysql, 32 connections", func(t *testing.T) *sqldb.DB { return openMySQLPool(t, scope, 32) }, 12},
		{"postgres, 32 connections", func(t *testing.T) *sqldb.DB { return openPostgresPool(t, 32) }, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := tt.open(t)
			b, err := New(ctx, db, Config{Scope: scope, ReclaimInterval: Off})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if cap(b.slots) != tt.slots {
				t.Fatalf("TryAcquire slots = %d, want %d", cap(b.slots), tt.slots)
			}
			if b.d.Name != db.Dialect.Name {
				t.Fatalf("lock dialect %q on a %q database", b.d.Name, db.Dialect.Name)
			}
			// Only SQLite, whose writers run one at a time, groups transactions: elsewhere a
			// group would hold several keys' row locks at once.
			if grouped := b.group != nil; grouped != (db.Dialect.Name == "sqlite") {
				t.Fatalf("group commit %v on %s", grouped, db.Dialect.Name)
			}
			// Only PostgreSQL batches compare-and-sets into one UPDATE … FROM (VALUES …).
			if batched := b.cases != nil; batched != (db.Dialect.Name == "postgres") {
				t.Fatalf("batched compare-and-set %v on %s", batched, db.Dialect.Name)
			}
			if err := b.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := db.PingContext(ctx); err != nil {
				t.Fatalf("shared pool after Close: %v, want it still open", err)
			}
		})
	}
}

// openMySQLPool opens a pool of conns on the test database and drops scope when the test ends.
func openMySQLPool(t *testing.T, scope string, conns int) *sqldb.DB {
	db, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), conns)
	if err != nil {
		t.Fatalf("open mysql (start it with deploy/dev/backends.sh up): %v", err)
	}
	t.Cleanup(func() {
		DropScope(context.Background(), db.DB, scope) //nolint:errcheck // best effort
		db.Close()
	})
	return db
}

// openPostgresPool opens a pool of conns on a schema of the test's own.
func openPostgresPool(t *testing.T, conns int) *sqldb.DB {
	db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: conns})
	if err != nil {
		t.Fatalf("open postgres (start it with deploy/dev/backends.sh up): %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
