package sqltask_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestUpgradeAddsLeaseHash opens a SQLite file whose coordkit_tasks predates lease secrets,
// with a task leased by the old version: the column is added, the old lease cannot be
// finished by any secret (it has none), and once it expires the sweep recovers the task,
// whose next lease works; pool settings work on it too.
func TestUpgradeAddsLeaseHash(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tasks.db")
	old, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for _, q := range []string{
		`CREATE TABLE coordkit_tasks (
			seq INTEGER PRIMARY KEY AUTOINCREMENT, pool TEXT NOT NULL, id TEXT NOT NULL, state INTEGER NOT NULL,
			neg_priority INTEGER NOT NULL, rnd INTEGER NOT NULL, run_at INTEGER NOT NULL, token INTEGER NOT NULL,
			attempt INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL, failures INTEGER NOT NULL DEFAULT 0,
			recoveries INTEGER NOT NULL DEFAULT 0, payload BLOB NOT NULL, last_error TEXT NOT NULL DEFAULT '')`,
	} {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	const token = 7 << 40
	if _, err := old.ExecContext(ctx, `INSERT INTO coordkit_tasks (pool, id, state, neg_priority, rnd, run_at, token, attempt, max_attempts, payload)
		VALUES ('p', 'old', 2, 0, 1, ?, ?, 1, 5, x'')`, now+1500, token); err != nil {
		t.Fatal(err)
	}
	old.Close()

	b, err := sqltask.OpenSQLite(ctx, path, sqltask.Config{})
	if err != nil {
		t.Fatalf("open a table without lease_hash: %v", err)
	}
	defer b.Close()
	for _, d := range []string{"", taskpick.LeaseDigest(""), taskpick.LeaseDigest("anything")} {
		if err := b.Ack(ctx, "p", "old", taskpick.Lease{Token: token, Digest: d}); !errors.Is(err, taskpick.ErrStaleLease) {
			t.Fatalf("Ack of the old lease with digest %q: %v, want ErrStaleLease", d, err)
		}
	}
	digest := taskpick.LeaseDigest("new")
	var picked taskpick.Picked
	for deadline := time.Now().Add(10 * time.Second); len(picked.Tasks) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the old lease was not recovered within 10s of its end")
		}
		if _, err := b.Sweep(ctx, 100); err != nil {
			t.Fatal(err)
		}
		if picked, err = b.Pick(ctx, "p", taskpick.PickSpec{N: 1, TTL: time.Minute, Digests: []string{digest}, MaxBytes: taskpick.DefaultMaxAnswerBytes}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lt := picked.Tasks[0]; lt.ID != "old" || lt.Token <= token || lt.Attempt != 2 {
		t.Fatalf("picked %+v after the recovery, want task old at attempt 2 with a token above %d", lt, uint64(token))
	}
	if err := b.Ack(ctx, "p", "old", taskpick.Lease{Token: picked.Tasks[0].Token, Digest: digest}); err != nil {
		t.Fatalf("Ack of the new lease: %v", err)
	}
	// Unique tasks work on the old table: their keys live in a table the open created.
	res, err := b.Put(ctx, "p", []taskpick.NewTask{
		{ID: "u1", MaxAttempts: 1, UniqueKey: "k", UniqueScope: taskpick.UniqueActive},
		{ID: "u2", MaxAttempts: 1, UniqueKey: "k", UniqueScope: taskpick.UniqueActive},
	})
	if err != nil || !res[0].Created || !res[1].Duplicate || res[1].HolderID != "u1" {
		t.Fatalf("unique Put on an upgraded table = %+v, %v; want u1 created, u2 its duplicate", res, err)
	}
	// The table made before pool settings gets them: the settings table is created beside it.
	if _, err := b.SetSettings(ctx, "p", taskpick.PoolSettings{MaxAttempts: 3}); err != nil {
		t.Fatalf("SetSettings on an upgraded database: %v", err)
	}
	if err := b.SetPaused(ctx, "p", true); err != nil {
		t.Fatalf("SetPaused on an upgraded database: %v", err)
	}
	if _, err := b.Put(ctx, "p", []taskpick.NewTask{{ID: "new"}}); err != nil {
		t.Fatal(err)
	}
	if p, err := b.Pick(ctx, "p", taskpick.PickSpec{N: 1, TTL: time.Minute, Digests: []string{digest}, MaxBytes: taskpick.DefaultMaxAnswerBytes}); err != nil || !p.Paused || len(p.Tasks) != 0 {
		t.Fatalf("Pick of a paused pool on an upgraded database: %+v %v", p, err)
	}
	if task, err := b.Get(ctx, "p", "new"); err != nil || task.MaxAttempts != 3 {
		t.Fatalf("a task put without max attempts: %+v %v, want the pool's 3", task, err)
	}
	// A second open finds the column and adds nothing.
	again, err := sqltask.OpenSQLite(ctx, path, sqltask.Config{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	again.Close()
}
