package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/coordkit/coordkit/libs/testenv"
)

// freshPostgresSchema is a schema name nobody uses yet in the tests' database, dropped with
// everything in it when the test ends, and a handle on that database.
func freshPostgresSchema(t *testing.T) (string, *sql.DB) {
	t.Helper()
	db, err := sql.Open("pgx", testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("t_serve_%x", rand.Uint32())
	t.Cleanup(func() {
		db.Exec(`DROP SCHEMA IF EXISTS "` + name + `" CASCADE`) //nolint:errcheck // best effort: the name is the test's own
		db.Close()
	})
	if postgresSchemaExists(t, db, name) {
		t.Fatalf("schema %s exists before the test", name)
	}
	return name, db
}

func postgresSchemaExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM pg_namespace WHERE nspname = $1", name).Scan(&n); err != nil {
		t.Fatalf("postgres at %s (deploy/dev/backends.sh up starts it): %v", testenv.PostgresURL(), err)
	}
	return n == 1
}

// TestServePostgres runs `coord serve --postgres-url --postgres-schema` on the dev
// PostgreSQL: it creates the schema, every service runs its postgres backend there (/readyz
// lists it ok for locks, tasks and IDs) and the CLI locks, picks and takes segment IDs
// through it, with the tables in that schema.
func TestServePostgres(t *testing.T) {
	t.Parallel()
	schema, db := freshPostgresSchema(t)
	url, log := serveLogged(t, "--postgres-url", testenv.PostgresURL(), "--postgres-schema", schema)
	if !postgresSchemaExists(t, db, schema) {
		t.Errorf("serve --postgres-schema %s did not create the schema", schema)
	}
	code, services := readyz(t, url)
	for _, svc := range []string{"lock", "taskpick", "idgen"} {
		if services[svc]["postgres"] != "ok" {
			t.Errorf("/readyz = %d %v: %s's postgres backend not ok", code, services, svc)
		}
	}
	if code != 200 {
		t.Fatalf("/readyz = %d %v, want 200", code, services)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := coord(t, append(args, "--server", url)...)
		if err != nil {
			t.Fatalf("coord %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	var acq struct {
		Acquired bool
		Lease    struct{ Owner, Backend string }
	}
	if out := run("lock", "acquire", "pg-key", "--ttl", "1m", "--backend", "postgres", "--json"); json.Unmarshal([]byte(out), &acq) != nil ||
		!acq.Acquired || acq.Lease.Backend != "postgres" {
		t.Fatalf("lock acquire --backend postgres = %s, want acquired on postgres", out)
	}
	run("lock", "release", "pg-key", "--owner", acq.Lease.Owner, "--backend", "postgres")
	run("task", "put", "pool", "t1", "--payload", "x", "--backend", "postgres")
	var picked struct {
		Tasks []struct{ ID, LeaseToken, LeaseSecret string }
	}
	if err := json.Unmarshal([]byte(run("task", "pick", "pool", "--ttl", "1m", "--json", "--backend", "postgres")), &picked); err != nil ||
		len(picked.Tasks) != 1 || picked.Tasks[0].ID != "t1" {
		t.Fatalf("task pick --backend postgres: %v (%+v), want t1", err, picked)
	}
	run("task", "ack", "pool", "t1", picked.Tasks[0].LeaseToken+":"+picked.Tasks[0].LeaseSecret, "--backend", "postgres")
	run("id", "create-tag", "orders")
	if ids := strings.Fields(run("id", "next", "--mode", "segment", "--tag", "orders", "--count", "5")); len(ids) != 5 || !increasing(ids) {
		t.Fatalf("segment ids = %v, want 5 increasing", ids)
	}
	var tables int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = $1", schema).Scan(&tables); err != nil || tables == 0 {
		t.Errorf("%d tables in schema %s (%v), want the services' tables there", tables, schema, err)
	}
	if !strings.Contains(log.String(), `"schema":"`+schema+`"`) && !strings.Contains(log.String(), "schema="+schema) {
		t.Errorf("the log does not name the schema %s:\n%s", schema, log)
	}
}

// TestServePostgresEnv: COORDKIT_POSTGRES_URL and COORDKIT_POSTGRES_SCHEMA stand for the
// flags, as for every flag.
func TestServePostgresEnv(t *testing.T) {
	schema, db := freshPostgresSchema(t)
	t.Setenv("COORDKIT_POSTGRES_URL", testenv.PostgresURL())
	t.Setenv("COORDKIT_POSTGRES_SCHEMA", schema)
	url, _ := serveLogged(t)
	if code, services := readyz(t, url); code != 200 {
		t.Fatalf("/readyz = %d %v, want 200", code, services)
	}
	if !postgresSchemaExists(t, db, schema) {
		t.Errorf("COORDKIT_POSTGRES_SCHEMA=%s: schema not created", schema)
	}
}

// TestServePostgresErrors: a PostgreSQL that refuses, stalls or is named wrongly fails serve
// within a few seconds (the 2s connect timeout, not the OS's minutes), with an error naming
// --postgres-url, and neither the error nor the log ever shows the password.
func TestServePostgresErrors(t *testing.T) {
	t.Parallel()
	const secret = "pg-topsecret-pw"
	stalled := testenv.NewProxy(t, mustURL(t, testenv.PostgresURL()).Host)
	stalled.Stall()
	for _, c := range []struct {
		name, url, want string
	}{
		{"refused", "postgres://coord:" + secret + "@" + freeAddr(t) + "/coordkit?sslmode=disable", "connect"},
		{"stalled", "postgres://coord:" + secret + "@" + stalled.Addr() + "/coordkit?sslmode=disable", "timeout"},
		{"password in the query", "postgres://coord@" + freeAddr(t) + "/coordkit?sslmode=disable&password=" + secret, "connect"},
		{"key=value string", "host=127.0.0.1 port=" + mustURL(t, "//"+freeAddr(t)).Port() + " user=coord password=" + secret + " dbname=coordkit sslmode=disable", "connect"},
		{"malformed", "postgres://coord:" + secret + "@127.0.0.1:notaport/coordkit", "postgres url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			log := &lockedBuffer{}
			began := time.Now()
			err := run(ctx, []string{"serve", "--addr", freeAddr(t), "--data-dir", t.TempDir(), "--log-level", "info", "--postgres-url", c.url}, io.Discard, log)
			took := time.Since(began)
			if err == nil || !strings.Contains(err.Error(), "--postgres-url") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("serve error = %v, want one naming --postgres-url and containing %q", err, c.want)
			}
			if strings.Contains(err.Error()+log.String(), secret) {
				t.Fatalf("the error or log shows the password: %v\n%s", err, log.String())
			}
			// 2s connect timeout, one retry by pgx's fallbacks at most, a wide margin for load.
			if took > 10*time.Second {
				t.Errorf("serve failed after %v, want within a few seconds", took)
			}
			t.Logf("%v after %v", err, took.Round(time.Millisecond))
		})
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
