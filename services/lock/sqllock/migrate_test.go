package sqllock

import (
	"context"
	"crypto/rand"
	"database/sql"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// legacySchema is the single table of versions before the fence floors, per engine.
var legacySchema = map[string]string{
	"sqlite": `CREATE TABLE IF NOT EXISTS coordkit_locks (
		scope         TEXT    NOT NULL,
		lock_key      TEXT    NOT NULL,
		owner         TEXT    NOT NULL DEFAULT '',
		hold_count    INTEGER NOT NULL DEFAULT 0,
		fencing_token INTEGER NOT NULL DEFAULT 0,
		expires_at    INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (scope, lock_key)
	) WITHOUT ROWID`,
	"mysql": `CREATE TABLE IF NOT EXISTS coordkit_locks (
		scope         VARBINARY(64)   NOT NULL,
		lock_key      VARBINARY(512)  NOT NULL,
		owner         VARBINARY(128)  NOT NULL DEFAULT '',
		hold_count    INT UNSIGNED    NOT NULL DEFAULT 0,
		fencing_token BIGINT UNSIGNED NOT NULL DEFAULT 0,
		expires_at    BIGINT          NOT NULL DEFAULT 0,
		PRIMARY KEY (scope, lock_key)
	) ENGINE=InnoDB`,
}

// TestMigrateFromSingleTable starts several instances at once on a scope whose locks live in
// the old single table: a live lease carries over (same holder, token and holds, still
// exclusive, its owner can renew and release it), every key's next token is above every
// token the old table gave out, and the copy happens once: a lease released after the
// upgrade does not come back when another instance starts.
func TestMigrateFromSingleTable(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		if legacySchema[e.name] == "" {
			t.Skipf("no version of the single-table layout ran on %s", e.name)
		}
		ctx := context.Background()
		s := e.newStore(t)
		s.exec(t, legacySchema[e.name])
		t.Cleanup(func() { s.raw.Exec("DELETE FROM "+legacyTable+" WHERE scope = ?", s.scope) })
		now := time.Now().UnixMilli()
		for _, r := range []struct {
			key, owner     string
			holds          int
			token, expires int64
		}{
			{"live", "old-owner", 2, 7, now + 60_000},
			{"free", "", 0, 42, 0},
			{"expired", "gone", 1, 9, now - 1_000},
		} {
			s.exec(t, "INSERT INTO "+legacyTable+" (scope, lock_key, owner, hold_count, fencing_token, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
				s.scope, r.key, r.owner, r.holds, r.token, r.expires)
		}

		bs := make([]*Backend, 3)
		var wg sync.WaitGroup
		for i := range bs {
			wg.Go(func() { bs[i] = s.open(t, Config{KeepFree: Off, ReclaimInterval: Off}) })
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		b := bs[0]

		st, err := b.Inspect(ctx, "live")
		if err != nil || !st.Held || st.FencingToken != 7 || st.HoldCount != 2 || st.HolderID != "" {
			t.Fatalf("live lease after the upgrade: %+v, %v; want held, token 7, 2 holds, no holder id (an old lease's owner is unknown)", st, err)
		}
		if att, err := b.TryAcquire(ctx, "live", "rival", time.Minute); err != nil || att.Acquired {
			t.Fatalf("rival on a carried-over lease: %+v, %v", att, err)
		}
		lease, err := b.Renew(ctx, "live", "old-owner", 0)
		if err != nil || time.Until(lease.ExpiresAt) < lock.DefaultTTL-5*time.Second || time.Until(lease.ExpiresAt) > lock.DefaultTTL {
			t.Fatalf("renew without ttl of a carried-over lease: %+v, %v; want the default ttl", lease, err)
		}
		for _, key := range []string{"free", "expired", "never-seen"} {
			att, err := b.TryAcquire(ctx, key, "new", time.Minute)
			if err != nil || !att.Acquired || att.Lease.FencingToken <= 42 {
				t.Fatalf("acquire %q after the upgrade: %+v, %v; want a token above the old table's 42", key, att, err)
			}
		}
		for range 2 {
			if _, _, err := b.Release(ctx, "live", "old-owner", 0); err != nil {
				t.Fatalf("old owner's release: %v", err)
			}
		}
		if _, err := b.Reclaim(ctx); err != nil {
			t.Fatal(err)
		}
		late := s.open(t)
		if st, err := late.Inspect(ctx, "live"); err != nil || st.Held {
			t.Fatalf("an instance started after the upgrade brought back a released lease: %+v, %v", st, err)
		}
	})
}

// TestMigrateAddsHolderID starts several instances at once on a leases table from before
// holder ids, whose rows hold owner secrets in plain: the column is added once (the
// instances that lose the race still start), the old lease stays exclusive until it expires,
// shown with no holder id, and new leases get one.
func TestMigrateAddsHolderID(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			raw, open := freshDatabase(t, e.name)
			old := strings.Replace(dialects[e.name].Schema[0], "holder_id", "-- no holder_id", 1)
			old = regexp.MustCompile(`(?m)^.*-- no holder_id.*\n`).ReplaceAllString(old, "")
			if strings.Contains(old, "holder_id") {
				t.Fatalf("old schema still has holder_id:\n%s", old)
			}
			if _, err := raw.Exec(old); err != nil {
				t.Fatalf("old schema: %v", err)
			}
			if _, err := raw.Exec("INSERT INTO "+leasesTable+" (scope, lock_key, owner, hold_count, fencing_token, expires_at, ttl_ms) VALUES (?, ?, ?, 1, 5, ?, 60000)",
				DefaultScope, "old", "plain-old-owner-secret", time.Now().Add(time.Minute).UnixMilli()); err != nil {
				t.Fatalf("old row: %v", err)
			}
			bs := make([]*Backend, 3)
			var wg sync.WaitGroup
			for i := range bs {
				wg.Go(func() { bs[i] = open(t) })
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			b := bs[0]
			st, err := b.Inspect(ctx, "old")
			if err != nil || !st.Held || st.FencingToken != 5 || st.HolderID != "" {
				t.Fatalf("old lease after the upgrade: %+v, %v; want held, token 5, no holder id", st, err)
			}
			if att, err := b.TryAcquire(ctx, "old", "some-owner-digest", time.Minute); err != nil || att.Acquired || att.Holder.HolderID != "" {
				t.Fatalf("acquire of the old lease: %+v, %v; want busy, by an unknown holder", att, err)
			}
			att, err := bs[2].TryAcquire(ctx, "new", "some-owner-digest", time.Minute)
			if err != nil || !att.Acquired || len(att.Lease.HolderID) != 16 {
				t.Fatalf("acquire after the upgrade: %+v, %v; want acquired with a holder id", att, err)
			}
			if st, err := bs[1].Inspect(ctx, "new"); err != nil || st.HolderID != att.Lease.HolderID {
				t.Fatalf("inspect from another instance: %+v, %v; want holder %s", st, err, att.Lease.HolderID)
			}
		})
	}
}

var dialects = map[string]Dialect{"sqlite": SQLite, "mysql": MySQL, "postgres": Postgres}

// freshDatabase returns an empty database of the engine, apart from every other test's
// (SQLite: a new file; MySQL: a new database, PostgreSQL: a new schema, dropped when the
// test ends), a raw handle on
// it and a function that opens a backend on it.
func freshDatabase(t *testing.T, engine string) (*sql.DB, func(t *testing.T) *Backend) {
	t.Helper()
	ctx := context.Background()
	if engine == "sqlite" {
		path := filepath.Join(t.TempDir(), "locks.db")
		raw, err := sqldb.OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		return raw.DB, func(t *testing.T) *Backend {
			b, err := OpenSQLite(ctx, path, Config{ReclaimInterval: Off})
			if err != nil {
				t.Errorf("open: %v", err)
				return nil
			}
			t.Cleanup(func() { b.Close() })
			return b
		}
	}
	if engine == "postgres" {
		pg := sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: 2}
		raw, err := sqldb.OpenPostgres(ctx, testenv.PostgresURL(), pg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		return raw.DB, func(t *testing.T) *Backend {
			b, err := OpenPostgres(ctx, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: pg.Schema}, Config{ReclaimInterval: Off})
			if err != nil {
				t.Errorf("open: %v", err)
				return nil
			}
			t.Cleanup(func() { b.Close() })
			return b
		}
	}
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", testenv.MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	cfg.DBName = "coordkit_migrate_" + strings.ToLower(rand.Text()[:10])
	if _, err := admin.Exec("CREATE DATABASE " + cfg.DBName); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + cfg.DBName) }) //nolint:errcheck // best effort
	dsn := cfg.FormatDSN()
	raw, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return raw, func(t *testing.T) *Backend {
		b, err := OpenMySQL(ctx, dsn, Config{Scope: DefaultScope, ReclaimInterval: Off})
		if err != nil {
			t.Errorf("open: %v", err)
			return nil
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
}
