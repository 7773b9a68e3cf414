package sqllock

import (
	"context"
	"sync"
	"testing"
	"time"

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
			wg.Go(func() { bs[i] = s.open(t, WithKeepFree(0), WithReclaimInterval(0)) })
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		b := bs[0]

		st, err := b.Inspect(ctx, "live")
		if err != nil || !st.Held || st.FencingToken != 7 || st.HoldCount != 2 || st.HolderID != lock.HolderID("old-owner") {
			t.Fatalf("live lease after the upgrade: %+v, %v; want held by old-owner, token 7, 2 holds", st, err)
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
