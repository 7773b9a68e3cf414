package sqldb_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
)

func openPostgres(t *testing.T, cfg sqldb.PostgresConfig) *sqldb.DB {
	t.Helper()
	if cfg.Schema == "" {
		cfg.Schema = testenv.PostgresSchema(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := sqldb.OpenPostgres(ctx, testenv.PostgresURL(), cfg)
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestPostgresPlaceholdersAndTypes(t *testing.T) {
	db := openPostgres(t, sqldb.PostgresConfig{})
	ctx := context.Background()
	d := db.Dialect
	if _, err := db.ExecContext(ctx, "CREATE TABLE kv (k "+d.Key+" PRIMARY KEY, n "+d.Int64+" NOT NULL, v "+d.Blob+")"); err != nil {
		t.Fatal(err)
	}
	ins := d.InsertIgnore + " INTO kv (k, n, v) VALUES (?, ?, ?)" + d.OnConflictIgnore
	for i, k := range []string{"a", "A", "a ", "ü", "a"} {
		if _, err := db.ExecContext(ctx, ins, k, uint64(1)<<62+uint64(i), []byte{0, 1, 2}); err != nil {
			t.Fatalf("insert %q: %v", k, err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kv").Scan(&n); err != nil || n != 4 {
		t.Fatalf("rows = %d, %v; want 4 (a, A, a+space, ü: no collation folds two keys into one, the repeated a is ignored)", n, err)
	}
	var got uint64
	if err := db.QueryRowContext(ctx, "SELECT n FROM kv WHERE k = ? AND '?' = '?'", "a").Scan(&got); err != nil || got != 1<<62 {
		t.Fatalf("n = %d, %v; want %d (the first insert, kept)", got, err, uint64(1)<<62)
	}
	if err := db.QueryRowContext(ctx, d.TableExists, "kv").Scan(&n); err != nil || n != 1 {
		t.Fatalf("TableExists(kv) = %d, %v", n, err)
	}
}

func TestPostgresClockIsTruncatedMillis(t *testing.T) {
	db := openPostgres(t, sqldb.PostgresConfig{})
	for range 20 {
		before := time.Now().UnixMilli()
		var ms int64
		if err := db.QueryRowContext(context.Background(), "SELECT "+db.Dialect.NowMillis).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		after := time.Now().UnixMilli()
		// The server shares this machine's clock: never ahead of the time read after.
		if ms < before-1000 || ms > after {
			t.Fatalf("database clock %d outside [%d, %d]", ms, before, after)
		}
	}
	var frac, floored int64
	// 0.999 ms past a whole millisecond reads as that millisecond, never the next.
	q := "SELECT (FLOOR(EXTRACT(EPOCH FROM TIMESTAMPTZ '2026-01-01 00:00:00.000999+00') * 1000))::BIGINT, " +
		"(EXTRACT(EPOCH FROM TIMESTAMPTZ '2026-01-01 00:00:00+00') * 1000)::BIGINT"
	if err := db.QueryRowContext(context.Background(), q).Scan(&frac, &floored); err != nil {
		t.Fatal(err)
	}
	if frac != floored {
		t.Fatalf("a time 0.999 ms past %d reads %d: NowMillis must truncate", floored, frac)
	}
	if !strings.Contains(db.Dialect.NowMillis, "FLOOR(") {
		t.Fatalf("NowMillis %q does not truncate", db.Dialect.NowMillis)
	}
}

func TestPostgresStatementTimeout(t *testing.T) {
	db := openPostgres(t, sqldb.PostgresConfig{StatementTimeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := db.ExecContext(context.Background(), "SELECT pg_sleep(5)")
	if err == nil {
		t.Fatal("a 5 s statement ran under a 200 ms statement timeout")
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Fatalf("the statement timeout cut after %v", el)
	}
}

func TestPostgresDeadlockIsRetryable(t *testing.T) {
	db := openPostgres(t, sqldb.PostgresConfig{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE d (id INT PRIMARY KEY, n INT); INSERT INTO d VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	// Two transactions lock the rows in opposite orders: PostgreSQL rolls one back with
	// deadlock_detected, which Victim calls safe to run again.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	locked := make(chan struct{}, 2)
	for i, order := range [][2]int{{1, 2}, {2, 1}} {
		wg.Go(func() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				errs[i] = err
				return
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, "UPDATE d SET n = n + 1 WHERE id = ?", order[0]); err != nil {
				errs[i] = err
				return
			}
			locked <- struct{}{}
			for len(locked) < 2 && cap(locked) == 2 {
				time.Sleep(time.Millisecond)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE d SET n = n + 1 WHERE id = ?", order[1]); err != nil {
				errs[i] = err
				return
			}
			errs[i] = tx.Commit()
		})
	}
	wg.Wait()
	victims := 0
	for _, err := range errs {
		if err != nil {
			if !db.Dialect.Victim(ctx, err) {
				t.Fatalf("error %v is not a deadlock victim", err)
			}
			victims++
		}
	}
	if victims != 1 {
		t.Fatalf("%d deadlock victims, want 1 (errors: %v)", victims, errs)
	}
}

func TestPostgresSchemaCreatedOnceUnderRace(t *testing.T) {
	schema := testenv.PostgresSchema(t) + "_new"
	t.Cleanup(func() {
		db := openPostgres(t, sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t)})
		db.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+sqldb.QuoteIdent(schema)+" CASCADE")
	})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 1})
			if err == nil {
				_, err = db.ExecContext(context.Background(), "CREATE TABLE IF NOT EXISTS x"+string(rune('a'+i))+" (id INT)")
				db.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("8 instances opening a new schema at once: %v", err)
	}
}

func TestPostgresPasswordNeverShown(t *testing.T) {
	for _, raw := range []string{
		"postgres://coord:s3cretpw@127.0.0.1:1/coordkit?sslmode=disable&connect_timeout=1",
		"postgres://coord@127.0.0.1:1/coordkit?password=s3cretpw&sslmode=disable&connect_timeout=1",
		"host=127.0.0.1 port=1 user=coord password=s3cretpw dbname=coordkit sslmode=disable connect_timeout=1",
		"postgres://coord:s3cretpw@127.0.0.1:1/coordkit?sslmode=bogus",
		// The password of the client's key file: as secret as the user's.
		"postgres://coord@127.0.0.1:1/coordkit?sslpassword=s3cretpw&sslmode=disable&connect_timeout=1",
		"postgres://coord@127.0.0.1:1/coordkit?sslpassword=s3cretpw&sslmode=bogus",
	} {
		_, err := sqldb.OpenPostgres(context.Background(), raw, sqldb.PostgresConfig{})
		if err == nil {
			t.Fatalf("OpenPostgres(%q) connected to a closed port", sqldb.RedactPostgresURL(raw))
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("error shows the password: %v", err)
		}
		if strings.Contains(sqldb.RedactPostgresURL(raw), "s3cretpw") {
			t.Errorf("RedactPostgresURL shows the password: %s", sqldb.RedactPostgresURL(raw))
		}
	}
}

// TestPostgresPlaceholdersBesideOddLexemes runs statements whose ? placeholders follow a
// lexeme that hides a quote, a comment's end or a dollar sign: an escape string (E'…', where
// \' is a quote inside it), a nested block comment, and an identifier holding $ (PostgreSQL
// allows it after the first character). Each ? outside them must become the next $n, and
// none inside them.
func TestPostgresPlaceholdersBesideOddLexemes(t *testing.T) {
	db := openPostgres(t, sqldb.PostgresConfig{})
	for _, tc := range []struct {
		name, query, want string
	}{
		{"escape string", `SELECT E'it\'s ?' || ?::text`, "it's ?x"},
		{"escaped quote at the end", `SELECT E'?\'' || ?::text`, "?'x"},
		{"escaped backslash", `SELECT e'\\' || ?::text`, `\x`},
		{"doubled quote in an escape string", `SELECT E'a''?' || ?::text`, "a'?x"},
		{"nested comment", "SELECT /* a /* b */ ? */ ?::text", "x"},
		{"identifier with dollars", "SELECT a$b$ FROM (SELECT ?::text AS a$b$) t", "x"},
		{"dollar quote after an identifier", "SELECT x$ || $q$?$q$ || ?::text FROM (SELECT 'w' AS x$) t", "w?x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			if err := db.QueryRowContext(context.Background(), tc.query, "x").Scan(&got); err != nil {
				t.Fatalf("%s (numbered %q): %v", tc.query, sqldb.Numbered(tc.query), err)
			}
			if got != tc.want {
				t.Fatalf("%s = %q, want %q", tc.query, got, tc.want)
			}
		})
	}
}

// TestPostgresSessionTimeouts reads the timeouts a session of OpenPostgres runs with: the
// configured statement timeout bounds statements and idle time inside a transaction, unless
// the URL sets either.
func TestPostgresSessionTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name, query         string
		statement, idleInTx string
	}{
		{"default", "", "10s", "10s"},
		{"url sets statement_timeout", "statement_timeout=0", "0", "1500ms"},
		{"url options set both", "options=-c%20statement_timeout%3D3s%20-c%20idle_in_transaction_session_timeout%3D0", "3s", "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t)}
			if tc.name != "default" {
				cfg.StatementTimeout = 1500 * time.Millisecond
			}
			raw := testenv.PostgresURL()
			if tc.query != "" && strings.Contains(raw, "?") {
				raw += "&" + tc.query
			} else if tc.query != "" {
				raw += "?" + tc.query
			}
			db, err := sqldb.OpenPostgres(context.Background(), raw, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var statement, idleInTx string
			if err := db.QueryRowContext(context.Background(), "SELECT current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&statement, &idleInTx); err != nil {
				t.Fatal(err)
			}
			if statement != tc.statement || idleInTx != tc.idleInTx {
				t.Fatalf("statement_timeout %s, idle_in_transaction_session_timeout %s; want %s and %s", statement, idleInTx, tc.statement, tc.idleInTx)
			}
		})
	}
}
