package sqltask_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestUpgradeAddsLimitColumns opens a SQLite file whose pool table predates limits on Pick,
// with a pool's settings in it: the columns are added, the settings read as before (no
// limits), and a limit stored afterwards holds.
func TestUpgradeAddsLimitColumns(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tasks.db")
	old, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE coordkit_task_pools (pool TEXT NOT NULL PRIMARY KEY, paused SMALLINT NOT NULL DEFAULT 0,
			max_attempts INTEGER NOT NULL DEFAULT 0, retry_initial_ms BIGINT NOT NULL DEFAULT 0, retry_max_ms BIGINT NOT NULL DEFAULT 0,
			retry_multiplier DOUBLE PRECISION NOT NULL DEFAULT 2, retry_jitter DOUBLE PRECISION NOT NULL DEFAULT 0)`,
		`INSERT INTO coordkit_task_pools (pool, max_attempts) VALUES ('p', 3)`,
	} {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()

	b, err := sqltask.OpenSQLite(ctx, path, sqltask.Config{})
	if err != nil {
		t.Fatalf("open a pool table without limits: %v", err)
	}
	defer b.Close()
	s, stored, err := b.Settings(ctx, "p")
	if err != nil || !stored || s.MaxAttempts != 3 || s.Limited() {
		t.Fatalf("settings after the upgrade: %+v %v %v, want max attempts 3 and no limits", s, stored, err)
	}
	if _, err := b.Put(ctx, "p", []taskpick.NewTask{{ID: "a"}, {ID: "b"}}); err != nil {
		t.Fatal(err)
	}
	if s, err = b.SetSettings(ctx, "p", taskpick.PoolSettings{MaxAttempts: 3, MaxLeased: 1}); err != nil || s.MaxLeased != 1 {
		t.Fatalf("SetSettings: %+v %v", s, err)
	}
	spec := taskpick.PickSpec{N: 2, TTL: time.Minute, Digests: []string{"d1", "d2"}, MaxBytes: taskpick.DefaultMaxAnswerBytes}
	p, err := b.Pick(ctx, "p", spec)
	if err != nil || len(p.Tasks) != 1 {
		t.Fatalf("a Pick of 2 in a pool limited to 1: %+v %v", p, err)
	}
	if p, err = b.Pick(ctx, "p", spec); err != nil || len(p.Tasks) != 0 || !p.Limited || p.NextDue.IsZero() {
		t.Fatalf("a Pick at the limit: %+v %v, want limited until the lease's end", p, err)
	}
}
