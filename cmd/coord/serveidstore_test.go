package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestServeIDStore runs `coord serve` next to a PostgreSQL database with each --id-store
// choice: the serving line and /readyz name the store, and a segment tag created through
// the CLI is kept in PostgreSQL exactly when the store is postgres.
func TestServeIDStore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		extra []string
		want  string
	}{
		{name: "auto is the one database", want: "postgres"},
		{name: "postgres of both", extra: []string{"--mysql-dsn", testenv.MySQLDSN(), "--id-store", "postgres"}, want: "postgres"},
		{name: "sqlite next to postgres", extra: []string{"--id-store", "sqlite"}, want: "sqlite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := testenv.PostgresSchema(t)
			args := append([]string{"--postgres-url", testenv.PostgresURL(), "--postgres-schema", schema}, tt.extra...)
			url, log := serveLogged(t, args...)
			for deadline := time.Now().Add(5 * time.Second); !strings.Contains(log.String(), "msg=serving"); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no serving line within 5s:\n%s", log)
				}
			}
			if !strings.Contains(log.String(), "idgen.id_store="+tt.want+" ") {
				t.Fatalf("serving line does not say idgen.id_store=%s:\n%s", tt.want, log)
			}
			if code, s := readyz(t, url); code != 200 || s["idgen"][tt.want] != "ok" {
				t.Fatalf("/readyz = %d %v, want 200 with idgen's %s ok", code, s, tt.want)
			}

			tag := testenv.Prefix(t)
			if out, err := coord(t, "id", "create-tag", tag, "--server", url, "--step", "10"); err != nil {
				t.Fatalf("id create-tag = %v\n%s", err, out)
			}
			out, err := coord(t, "id", "next", "--mode", "segment", "--tag", tag, "--count", "3", "--server", url)
			if err != nil || strings.Fields(out)[0] != "1" || len(strings.Fields(out)) != 3 {
				t.Fatalf("id next = %v\n%s; want the IDs 1 to 3", err, out)
			}
			db, err := sqldb.OpenPostgres(ctx, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var tables, rows int
			if err := db.QueryRowContext(ctx, db.Dialect.TableExists, "coordkit_idgen_segments").Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if tables > 0 {
				if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM coordkit_idgen_segments WHERE biz_tag = ?", tag).Scan(&rows); err != nil {
					t.Fatal(err)
				}
			}
			if inPostgres := rows == 1; inPostgres != (tt.want == "postgres") {
				t.Fatalf("tag rows in PostgreSQL: %d, want %d with --id-store %s", rows, map[bool]int{true: 1}[tt.want == "postgres"], tt.want)
			}
		})
	}
}
