package sqllock

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
)

// engine is one SQL engine under test.
type engine struct {
	name string
	// newStore makes a fresh, isolated store on the real engine: its own SQLite file, or
	// its own scope of the shared MariaDB, or its own schema of the shared PostgreSQL.
	newStore func(t *testing.T) *store
}

// store is an isolated lock store. open starts one more backend on it, as another service
// instance would; raw is a database handle of the test's own, apart from every backend's
// pool, for reaching into the tables.
type store struct {
	scope string
	raw   *sql.DB
	open  func(t *testing.T, cfg ...Config) *Backend
}

var engines = []engine{
	{name: "sqlite", newStore: sqliteStore},
	{name: "mysql", newStore: mysqlStore},
	{name: "postgres", newStore: postgresStore},
}

// forEngine runs f as a parallel subtest per engine.
func forEngine(t *testing.T, f func(t *testing.T, e engine)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			f(t, e)
		})
	}
}

func sqliteStore(t *testing.T) *store {
	path := filepath.Join(t.TempDir(), "locks.db")
	raw, err := sqldb.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { raw.Close() })
	return &store{scope: DefaultScope, raw: raw.DB, open: func(t *testing.T, cfg ...Config) *Backend {
		b, err := OpenSQLite(context.Background(), path, firstConfig(cfg))
		if err != nil {
			t.Fatalf("open sqlite: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}}
}

func mysqlStore(t *testing.T) *store {
	scope := strings.TrimPrefix(testenv.Prefix(t), "test:")
	if len(scope) > 64 {
		scope = scope[len(scope)-64:]
	}
	raw, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), 4)
	if err != nil {
		t.Fatalf("open mysql (start it with deploy/dev/backends.sh up): %v", err)
	}
	// Registered first, so it runs after every backend of the test has closed.
	t.Cleanup(func() {
		DropScope(context.Background(), raw.DB, scope) //nolint:errcheck // best effort
		raw.Close()
	})
	return &store{scope: scope, raw: raw.DB, open: func(t *testing.T, cfg ...Config) *Backend {
		c := firstConfig(cfg)
		c.Scope = scope
		b, err := OpenMySQL(context.Background(), testenv.MySQLDSN(), c)
		if err != nil {
			t.Fatalf("open mysql: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}}
}

func postgresStore(t *testing.T) *store {
	pg := sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: 4}
	raw, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), pg)
	if err != nil {
		t.Fatalf("open postgres (start it with deploy/dev/backends.sh up): %v", err)
	}
	t.Cleanup(func() { raw.Close() })
	return &store{scope: DefaultScope, raw: raw.DB, open: func(t *testing.T, cfg ...Config) *Backend {
		b, err := OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: pg.Schema}, firstConfig(cfg))
		if err != nil {
			t.Fatalf("open postgres: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}}
}

// firstConfig is the Config a store's open was given, or the zero one.
func firstConfig(cfg []Config) Config {
	if len(cfg) == 0 {
		return Config{}
	}
	return cfg[0]
}

// rows counts the store's lease rows (all keys, free ones too).
func (s *store) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.raw.QueryRow("SELECT COUNT(*) FROM "+leasesTable+" WHERE scope = ?", s.scope).Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

// keyRows counts key's lease rows (0 or 1).
func (s *store) keyRows(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := s.raw.QueryRow("SELECT COUNT(*) FROM "+leasesTable+" WHERE scope = ? AND lock_key = ?", s.scope, key).Scan(&n); err != nil {
		t.Fatalf("count rows of %q: %v", key, err)
	}
	return n
}

// exec runs a statement on the raw handle.
func (s *store) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := s.raw.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
