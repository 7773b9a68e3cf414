package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// PostgresSchema makes a schema of the test's own in the tests' PostgreSQL database
// (PostgresURL) and drops it, with everything in it, when the test ends: a test that opens
// its store there with sqldb.PostgresConfig{Schema: …} sees only its own tables and rows,
// and leaves nothing behind. It fails the test when PostgreSQL does not answer.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(fmt.Sprintf("t_%s_%x", sanitize(t.Name()), rand.Uint32()))
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	db, err := sql.Open("pgx", PostgresURL())
	if err != nil {
		t.Fatalf("testenv: postgres: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testenv: postgres at %s (start it with deploy/dev/backends.sh up or set COORDKIT_TEST_POSTGRES_URL): %v", PostgresURL(), err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", PostgresURL())
		if err != nil {
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("testenv: drop schema %s: %v", name, err)
		}
	})
	return name
}

// sanitize keeps the letters and digits of a test name, the rest as _.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}
