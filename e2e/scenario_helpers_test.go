package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
)

// backendArgs are the serve flags that enable one named backend (lock or task), plus the
// shared NATS. The MySQL database is always given: the ID service keeps its state there, and
// instances with it need no SQLite file of their own.
func backendArgs(t testing.TB, name string) []string {
	t.Helper()
	args := []string{"--nats-url", testenv.NATSURL(), "--mysql-dsn", testenv.MySQLDSN()}
	switch name {
	case "redis":
		args = append(args, "--redis-addr", testenv.RedisAddr())
	case "redlock":
		args = append(args, "--redlock-addrs", strings.Join(testenv.RedlockAddrs(), ","))
	case "zookeeper":
		args = append(args, "--zk-addrs", strings.Join(testenv.ZooKeeperAddrs(), ","))
	case "mysql":
	case "postgres":
		args = append(args, "--postgres-url", testenv.PostgresURL(), "--postgres-schema", testenv.PostgresSchema(t),
			"--id-store", "mysql")
	default:
		t.Fatalf("e2e: no serve flags for backend %q", name)
	}
	return args
}

// scenarioDB opens the tests' MariaDB database (the application's own store in the
// scenarios), closed when the test ends. An unreachable database fails the test.
func scenarioDB(t testing.TB) *sql.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := sqldb.OpenMySQL(ctx, testenv.MySQLDSN(), 32)
	if err != nil {
		t.Fatalf("e2e: MariaDB at %s: %v; start the dev backends with deploy/dev/backends.sh up", testenv.MySQLDSN(), err)
	}
	t.Cleanup(func() { db.Close() })
	return db.DB
}

// scenarioTables names one table per suffix, unique to this run (SQL identifiers: letters,
// digits and underscores), and drops them when the test ends.
func scenarioTables(t testing.TB, db *sql.DB, base string, suffixes ...string) []string {
	t.Helper()
	run := base + "_" + strings.ToLower(rand.Text()[:8])
	names := make([]string, len(suffixes))
	for i, s := range suffixes {
		names[i] = run + "_" + s
	}
	t.Cleanup(func() {
		for _, n := range names {
			if _, err := db.Exec("DROP TABLE IF EXISTS " + n); err != nil {
				t.Errorf("e2e: drop %s: %v", n, err)
			}
		}
	})
	return names
}

// mustExec runs statements that set a scenario up.
func mustExec(t testing.TB, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("e2e: %s: %v", s, err)
		}
	}
}

// pollUntil checks cond every 10ms until it holds, failing the test when timeout passes
// first. Bounds are generous: the machine may be loaded.
func pollUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("e2e: %s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queryInt runs a query that answers one integer; errors count as -1 so that polls keep on.
func queryInt(db *sql.DB, query string, args ...any) int64 {
	var n sql.NullInt64
	if err := db.QueryRow(query, args...).Scan(&n); err != nil || !n.Valid {
		return -1
	}
	return n.Int64
}

// helperBins caches the programs built from e2e/testdata, one build per test binary.
var helperBins sync.Map // name -> func() (string, error)

// helperBinary builds e2e/testdata/<name> (package main) once and returns its path.
func helperBinary(t testing.TB, name string) string {
	t.Helper()
	f, _ := helperBins.LoadOrStore(name, sync.OnceValues(func() (string, error) {
		out := filepath.Join(binDir, name)
		cmd := exec.Command("go", "build", "-o", out, "./testdata/"+name)
		cmd.Dir = filepath.Join(repoRoot(), "e2e")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("e2e: go build ./testdata/%s: %w\n%s", name, err, b)
		}
		return out, nil
	}))
	bin, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
