package redistask

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
)

// TestUniqueKeysLeaveWithTheirTasks: storage stays bounded by live tasks. A queued or active
// key is deleted with its task's hash (at an Ack, or the purge of a done task), a period key
// expires by itself, and a live task keeps its key.
func TestUniqueKeysLeaveWithTheirTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t, "")
	prefix := testenv.Prefix(t)
	testenv.CleanRedis(t, rdb, prefix)
	for _, retention := range []int{0, 1} {
		b := New(rdb, Config{Prefix: prefix, Retention: time.Duration(retention) * time.Millisecond})
		pool := fmt.Sprint("p", retention)
		tasks := []taskpick.NewTask{
			{ID: "a", MaxAttempts: 1, UniqueKey: "ka", UniqueScope: taskpick.UniqueActive},
			{ID: "q", MaxAttempts: 1, UniqueKey: "kq", UniqueScope: taskpick.UniqueQueued},
			{ID: "p", MaxAttempts: 1, UniqueKey: "kp", UniqueScope: taskpick.UniquePeriodScope, UniquePeriod: 1},
		}
		if _, err := b.Put(ctx, pool, tasks); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Put(ctx, pool, []taskpick.NewTask{{ID: "live", MaxAttempts: 1, UniqueKey: "kl", UniqueScope: taskpick.UniqueActive}}); err != nil {
			t.Fatal(err)
		}
		picked, err := b.Pick(ctx, pool, spec(3, taskpick.FIFO))
		if err != nil || len(picked.Tasks) != 3 {
			t.Fatalf("Pick = %v, %v", picked, err)
		}
		for i, lt := range picked.Tasks {
			if err := b.Ack(ctx, pool, lt.ID, lease(lt, i)); err != nil {
				t.Fatal(err)
			}
		}
		_, taskPrefix := b.keys(pool)
		for deadline := 0; ; deadline++ {
			if _, err := b.Sweep(ctx, 100); err != nil {
				t.Fatal(err)
			}
			keys, err := rdb.Keys(ctx, taskPrefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) == 2 { // the live task's hash and key
				break
			}
			time.Sleep(10 * time.Millisecond)
			if deadline == 500 {
				t.Fatalf("retention %d: keys %q left, want only the live task's hash and key", retention, keys)
			}
		}
		if n, err := rdb.Exists(ctx, taskPrefix+"\x00kl").Result(); err != nil || n != 1 {
			t.Fatalf("the live task's key: %d, %v", n, err)
		}
	}
}
