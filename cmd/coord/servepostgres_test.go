package main

import (
	"context"
	"database/sql"
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
// PostgreSQL: it creates the schema, is ready, logs the URL, and every service's postgres
// backend that /readyz lists is ok.
func TestServePostgres(t *testing.T) {
	t.Parallel()
	schema, db := freshPostgresSchema(t)
	url, log := serveLogged(t, "--postgres-url", testenv.PostgresURL(), "--postgres-schema", schema)
	if !postgresSchemaExists(t, db, schema) {
		t.Errorf("serve --postgres-schema %s did not create the schema", schema)
	}
	code, services := readyz(t, url)
	if code != 200 {
		t.Fatalf("/readyz = %d %v, want 200", code, services)
	}
	var on []string
	for svc, backends := range services {
		if st, ok := backends["postgres"]; ok {
			on = append(on, svc)
			if st != "ok" {
				t.Errorf("/readyz: %s's postgres backend is %q, want ok", svc, st)
			}
		}
	}
	t.Logf("services on postgres: %v", on)
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
