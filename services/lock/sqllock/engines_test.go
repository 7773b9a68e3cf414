package sqllock

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/testenv"
)

// engine is one SQL engine under test. open returns a fresh backend on an isolated store
// (its own SQLite file, or its own scope of the shared MariaDB), and
// the raw database for tests that reach into the tables.
type engine struct {
	name string
	open func(t *testing.T) (*Backend, *sql.DB)
}

var engines = []engine{
	{name: "sqlite", open: openSQLiteStore},
	{name: "mysql", open: openMySQLStore},
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

func openSQLiteStore(t *testing.T) (*Backend, *sql.DB) {
	b, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b, b.db
}

func openMySQLStore(t *testing.T) (*Backend, *sql.DB) {
	scope := testScope(t)
	b, err := OpenMySQL(context.Background(), testenv.MySQLDSN(), scope)
	if err != nil {
		t.Fatalf("open mysql (start it with deploy/dev/backends.sh up): %v", err)
	}
	t.Cleanup(func() {
		b.Close()
		db, err := sql.Open("mysql", testenv.MySQLDSN())
		if err != nil {
			return
		}
		defer db.Close()
		DropScope(context.Background(), db, scope) //nolint:errcheck // best effort
	})
	return b, b.db
}

// testScope is a scope unique to this test run that fits the scope column.
func testScope(t *testing.T) string {
	scope := strings.TrimPrefix(testenv.Prefix(t), "test:")
	if len(scope) > 64 {
		scope = scope[len(scope)-64:]
	}
	return scope
}
