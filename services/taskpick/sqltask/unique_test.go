package sqltask_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestUniqueRowsAreReclaimed: storage stays bounded by live tasks. Once the tasks that held
// queued and active keys are acked, a period passed, and a key was only tried by a Put of an
// existing id, the sweep deletes every row of the pool's keys; a live task keeps its row.
func TestUniqueRowsAreReclaimed(t *testing.T) {
	t.Parallel()
	for _, engine := range append([]string{"sqlite"}, rowLockEngines...) {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var db *sqldb.DB
			if engine == "sqlite" {
				var err error
				if db, err = sqldb.OpenSQLite(ctx, filepath.Join(t.TempDir(), "tasks.db")); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
			} else {
				db = openEngine(t, engine, 4)
			}
			b, err := sqltask.New(ctx, db, sqltask.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			pool := testenv.Prefix(t) + ":reclaim"
			t.Cleanup(func() {
				db.ExecContext(ctx, "DELETE FROM coordkit_tasks WHERE pool = ?", pool)       //nolint:errcheck // best effort
				db.ExecContext(ctx, "DELETE FROM coordkit_task_unique WHERE pool = ?", pool) //nolint:errcheck // best effort
			})
			var tasks []taskpick.NewTask
			for i := range 10 {
				scope := taskpick.UniqueActive
				if i%2 == 1 {
					scope = taskpick.UniqueQueued
				}
				tasks = append(tasks, taskpick.NewTask{ID: fmt.Sprint("t", i), MaxAttempts: 1, UniqueKey: fmt.Sprint("k", i), UniqueScope: scope})
			}
			tasks = append(tasks, taskpick.NewTask{ID: "p", MaxAttempts: 1, UniqueKey: "period", UniqueScope: taskpick.UniquePeriodScope, UniquePeriod: 20 * time.Millisecond})
			if _, err := b.Put(ctx, pool, tasks); err != nil {
				t.Fatal(err)
			}
			// An existing id claims no key: its key's row starts free and stays so.
			if _, err := b.Put(ctx, pool, []taskpick.NewTask{{ID: "t0", MaxAttempts: 1, UniqueKey: "never", UniqueScope: taskpick.UniqueActive}}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Put(ctx, pool, []taskpick.NewTask{{ID: "live", MaxAttempts: 1, UniqueKey: "live", UniqueScope: taskpick.UniqueActive}}); err != nil {
				t.Fatal(err)
			}
			digests := make([]string, len(tasks))
			for i := range digests {
				digests[i] = taskpick.LeaseDigest(fmt.Sprint("s", i))
			}
			picked, err := b.Pick(ctx, pool, taskpick.PickSpec{N: len(tasks), TTL: time.Minute, Digests: digests, MaxBytes: taskpick.DefaultMaxAnswerBytes})
			if err != nil || len(picked.Tasks) != len(tasks) {
				t.Fatalf("Pick = %d tasks, %v; want %d", len(picked.Tasks), err, len(tasks))
			}
			for i, lt := range picked.Tasks {
				if err := b.Ack(ctx, pool, lt.ID, taskpick.Lease{Token: lt.Token, Digest: digests[i]}); err != nil {
					t.Fatal(err)
				}
			}
			rows := func() (n int) {
				if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM coordkit_task_unique WHERE pool = ?", pool).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			for deadline := time.Now().Add(20 * time.Second); rows() != 1; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d rows of unique keys left after the sweeps, want 1 (the live task's)", rows())
				}
				if _, err := b.Sweep(ctx, 1000); err != nil {
					t.Fatal(err)
				}
			}
			res, err := b.Put(ctx, pool, []taskpick.NewTask{{ID: "again", MaxAttempts: 1, UniqueKey: "live", UniqueScope: taskpick.UniqueActive}})
			if err != nil || !res[0].Duplicate || res[0].HolderID != "live" {
				t.Fatalf("Put of the live task's key after the sweeps = %+v, %v; want a duplicate of it", res, err)
			}
		})
	}
}
