package lock_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/sqllock"
)

// mysqlStore isolates each test in its own scope of the shared test database.
func mysqlStore(t *testing.T) func(t *testing.T) lock.Backend {
	scope := testenv.Prefix(t)
	if len(scope) > 64 {
		scope = scope[len(scope)-64:]
	}
	t.Cleanup(func() {
		db, err := sql.Open("mysql", testenv.MySQLDSN())
		if err == nil {
			sqllock.DropScope(context.Background(), db, scope) //nolint:errcheck // best effort
			db.Close()
		}
	})
	return func(t *testing.T) lock.Backend {
		b, err := sqllock.OpenMySQL(context.Background(), testenv.MySQLDSN(), sqllock.Config{Scope: scope})
		if err != nil {
			t.Fatalf("open mysql (start it with deploy/dev/backends.sh up): %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
}
