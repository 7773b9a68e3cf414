package sqltask_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
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

// TestPostgresLimitedPicksOnASmallPool runs more concurrent Picks of a limited pool than the
// connection pool has connections, asking for different counts so the pick statements keep
// changing: a pick holding the pool's row must never wait for another connection (preparing a
// statement on the pool did, while every other connection waited for that row), so every
// task is picked and acked without an error well within the statement timeout.
func TestPostgresLimitedPicksOnASmallPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sqldb.OpenPostgres(ctx, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b, err := sqltask.New(ctx, db, sqltask.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const pool, tasks = "small", 300
	if _, err := b.SetSettings(ctx, pool, taskpick.PoolSettings{MaxLeased: 1000}); err != nil {
		t.Fatal(err)
	}
	batch := make([]taskpick.NewTask, tasks)
	for i := range batch {
		batch[i] = taskpick.NewTask{ID: fmt.Sprint("t", i)}
	}
	if _, err := b.Put(ctx, pool, batch); err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for n := 1 + w%10; acked.Load() < tasks && ctx.Err() == nil; n = n%10 + 1 {
				digests := make([]string, n)
				for i := range digests {
					digests[i] = fmt.Sprint("d", w, "-", i)
				}
				p, err := b.Pick(ctx, pool, taskpick.PickSpec{N: n, TTL: time.Minute, Digests: digests, MaxBytes: taskpick.DefaultMaxAnswerBytes})
				if err != nil {
					t.Errorf("Pick of %d: %v", n, err)
					return
				}
				for i, lt := range p.Tasks {
					if err := b.Ack(ctx, pool, lt.ID, taskpick.Lease{Token: lt.Token, Digest: digests[i]}); err != nil {
						t.Errorf("Ack %s: %v", lt.ID, err)
						return
					}
					acked.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if acked.Load() != tasks {
		t.Fatalf("%d of %d tasks acked", acked.Load(), tasks)
	}
}
