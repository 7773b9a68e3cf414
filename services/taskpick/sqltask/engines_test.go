package sqltask_test

import (
	"context"
	"testing"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
)

// rowLockEngines are the engines whose picks lock rows (not the whole database), on the dev
// servers: MySQL's database is shared, so tests there keep to pools of their own;
// PostgreSQL's tests each get a schema of their own.
var rowLockEngines = []string{"mysql", "postgres"}

// openEngine opens a handle of conns connections on the dev server of engine, closed when
// the test ends.
func openEngine(t *testing.T, engine string, conns int) *sqldb.DB {
	t.Helper()
	ctx := context.Background()
	var db *sqldb.DB
	var err error
	switch engine {
	case "mysql":
		db, err = sqldb.OpenMySQL(ctx, testenv.MySQLDSN(), conns)
	case "postgres":
		db, err = sqldb.OpenPostgres(ctx, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: conns})
	default:
		t.Fatalf("no engine %q", engine)
	}
	if err != nil {
		t.Fatalf("open %s (start it with deploy/dev/backends.sh up): %v", engine, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
