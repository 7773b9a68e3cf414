package lock_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/sqllock"
)

// postgresStore isolates each test in a schema of its own in the shared test database,
// dropped with everything in it when the test ends.
func postgresStore(t *testing.T) func(t *testing.T) lock.Backend {
	schema := testenv.PostgresSchema(t)
	return func(t *testing.T) lock.Backend {
		return openPostgres(t, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema})
	}
}

// openPostgres opens a lock backend on the PostgreSQL database at rawURL, closed when the
// test ends.
func openPostgres(t *testing.T, rawURL string, pg sqldb.PostgresConfig) *sqllock.Backend {
	t.Helper()
	b, err := sqllock.OpenPostgres(context.Background(), rawURL, pg, sqllock.Config{})
	if err != nil {
		t.Fatalf("open postgres (start it with deploy/dev/backends.sh up): %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// postgresRaw is a handle of the test's own on schema, apart from every backend's pool.
func postgresRaw(t *testing.T, schema string) *sqldb.DB {
	t.Helper()
	db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// postgresURLVia is the test database's URL with its host and port replaced by addr (a
// testenv.Proxy in front of the server).
func postgresURLVia(t *testing.T, addr string) string {
	t.Helper()
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatalf("postgres url: %v", err)
	}
	u.Host = addr
	return u.String()
}

// postgresAddr is the host:port of the test database.
func postgresAddr(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatalf("postgres url: %v", err)
	}
	return u.Host
}
