package redistask

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/redisslot"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
)

// hostileNames are pool names and task ids whose braces move Redis's hash tag around, plus
// invalid UTF-8 (which only the Go API passes) and 512-byte names.
var hostileNames = []string{
	"}", "{", "{}", "}{", "{a}b", "a}b{c}", "}}}{{{", "{{}}", "x{}y{z}", "🔒{🔑}",
	"\xff", "{\xff}", "\xfe{\xff}\xfd", strings.Repeat("}", 512), "{" + strings.Repeat("p", 510) + "}",
}

// openOn returns a backend on its own client of the Redis URL, under prefix.
func openOn(t *testing.T, url, prefix string) *Backend {
	t.Helper()
	rdb, err := redisconf.Open(context.Background(), redisconf.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return New(rdb, Config{Prefix: prefix, Retention: time.Minute})
}

// TestClusterOfThreeHostileNames runs every operation, and the sweep, on a three-master
// cluster with hostile pool names and task ids: a pool's keys and its tasks' hashes must share
// a slot (no CROSSSLOT, no "non local key"), whichever node serves it.
func TestClusterOfThreeHostileNames(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 3, Password: "pw"})
	a, b := openOn(t, cluster.URL(), DefaultPrefix), openOn(t, cluster.URL(), DefaultPrefix)
	ctx := context.Background()
	nodes := map[int]bool{}
	for _, pool := range hostileNames {
		nodes[redisslot.Of(pool)*len(cluster.Nodes)/redisslot.Count] = true
		tasks := make([]taskpick.NewTask, len(hostileNames))
		for i, id := range hostileNames {
			tasks[i] = taskpick.NewTask{ID: id, Payload: []byte(id), Priority: int32(i), MaxAttempts: 1, UniqueKey: id, UniqueScope: taskpick.UniqueActive}
		}
		created, err := a.Put(ctx, pool, tasks)
		if err != nil || len(created) != len(tasks) || !created[0].Created {
			t.Fatalf("Put(%q) = %v, %v", pool, created, err)
		}
		dups := make([]taskpick.NewTask, len(tasks))
		for i, nt := range tasks {
			dups[i] = taskpick.NewTask{ID: nt.ID + "'", MaxAttempts: 1, UniqueKey: nt.UniqueKey, UniqueScope: taskpick.UniqueActive}
		}
		if again, err := b.Put(ctx, pool, dups); err != nil || !again[0].Duplicate || again[0].HolderID != tasks[0].ID {
			t.Fatalf("Put(%q) of the same unique keys = %+v, %v; want duplicates of the first tasks", pool, again, err)
		}
		picked, err := b.Pick(ctx, pool, spec(len(tasks), taskpick.Priority))
		if err != nil || len(picked.Tasks) != len(tasks) || picked.Tasks[0].ID != hostileNames[len(hostileNames)-1] {
			t.Fatalf("Pick(%q) = %d tasks, %v; want all, highest priority first", pool, len(picked.Tasks), err)
		}
		for i, lt := range picked.Tasks {
			if string(lt.Payload) != lt.ID {
				t.Fatalf("pool %q task %q came back with payload %q", pool, lt.ID, lt.Payload)
			}
			switch i % 3 {
			case 0:
				if err := a.Ack(ctx, pool, lt.ID, lease(lt, i)); err != nil {
					t.Fatalf("Ack(%q, %q): %v", pool, lt.ID, err)
				}
			case 1:
				if err := a.Extend(ctx, pool, lt.ID, lease(lt, i), time.Minute); err != nil {
					t.Fatalf("Extend(%q, %q): %v", pool, lt.ID, err)
				}
				if dead, err := a.Nack(ctx, pool, lt.ID, lease(lt, i), 0, "boom"); err != nil || !dead {
					t.Fatalf("Nack(%q, %q) = %v, %v; want dead after its one attempt", pool, lt.ID, dead, err)
				}
			case 2:
				// The lease runs out: the sweep kills the task (one attempt).
				if err := a.Extend(ctx, pool, lt.ID, lease(lt, i), time.Millisecond); err != nil {
					t.Fatalf("Extend(%q, %q): %v", pool, lt.ID, err)
				}
			}
		}
		if got, err := b.Get(ctx, pool, picked.Tasks[0].ID); err != nil || got.State != taskpick.Done {
			t.Fatalf("Get(%q, %q) = %+v, %v; want done (retained)", pool, picked.Tasks[0].ID, got, err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	rec, err := a.Sweep(ctx, 1000)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if len(rec) != len(hostileNames) {
		t.Fatalf("Sweep recovered in %d pools, want %d: %+v", len(rec), len(hostileNames), rec)
	}
	for _, pool := range hostileNames {
		st, err := b.Stats(ctx, pool)
		n := uint64(len(hostileNames))
		if err != nil || st.Done != (n+2)/3 || st.Dead != n-(n+2)/3 || st.Leased != 0 {
			t.Fatalf("Stats(%q) = %+v, %v; want %d done and the rest dead", pool, st, err, (n+2)/3)
		}
		dead, total, _, err := a.ListDead(ctx, pool, 1000, taskpick.DefaultMaxAnswerBytes)
		if err != nil || uint64(len(dead)) != total || total != st.Dead {
			t.Fatalf("ListDead(%q) = %d of %d, %v", pool, len(dead), total, err)
		}
		requeued, err := a.Requeue(ctx, pool, []string{dead[0].ID})
		if err != nil || len(requeued) != 1 || !requeued[0] {
			t.Fatalf("Requeue(%q, %q) = %v, %v", pool, dead[0].ID, requeued, err)
		}
	}
	if len(nodes) != len(cluster.Nodes) {
		t.Fatalf("the pools landed on %d of %d nodes: the test does not cover the cluster", len(nodes), len(cluster.Nodes))
	}
}

// TestSentinelFailover: through redis+sentinel:// the backend follows the master the
// sentinels promote; tasks put and replicated before the failover are picked after it, and a
// lease taken before it is still held (its token still acks).
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	set := testenv.StartRedisSentinel(t, testenv.RedisSentinelConfig{Password: "pw"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := openOn(t, set.URL(), DefaultPrefix)
	const pool = "}{failover"
	if _, err := b.Put(ctx, pool, []taskpick.NewTask{{ID: "a"}, {ID: "b"}}); err != nil {
		t.Fatal(err)
	}
	before, err := b.Pick(ctx, pool, spec(1, taskpick.FIFO))
	if err != nil || len(before.Tasks) != 1 {
		t.Fatalf("Pick = %+v, %v", before, err)
	}
	if n, err := b.rdb.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}

	set.Failover(t)
	var after taskpick.Picked
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if after, err = b.Pick(ctx, pool, spec(10, taskpick.FIFO)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Pick after the failover: %v", err)
		}
	}
	if len(after.Tasks) != 1 || after.Tasks[0].ID == before.Tasks[0].ID {
		t.Fatalf("after the failover picked %+v, want the one task not leased before", after.Tasks)
	}
	if err := b.Ack(ctx, pool, before.Tasks[0].ID, lease(before.Tasks[0], 0)); err != nil {
		t.Fatalf("Ack of the lease taken before the failover: %v", err)
	}
	if err := b.Ack(ctx, pool, after.Tasks[0].ID, lease(after.Tasks[0], 0)); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

// testDigests are the lease digests the tests' picks hand out: the i-th task picked gets the
// i-th.
var testDigests = func() []string {
	d := make([]string, taskpick.MaxPickCount)
	for i := range d {
		d[i] = taskpick.LeaseDigest(fmt.Sprint("secret-", i))
	}
	return d
}()

// spec is a pick of n in order under testDigests, for a minute.
func spec(n int, order taskpick.Order) taskpick.PickSpec {
	return taskpick.PickSpec{N: n, TTL: time.Minute, Order: order, Digests: testDigests, MaxBytes: taskpick.DefaultMaxAnswerBytes}
}

// lease is the lease of lt, the i-th task of a pick made with spec.
func lease(lt taskpick.LeasedTask, i int) taskpick.Lease {
	return taskpick.Lease{Token: lt.Token, Digest: testDigests[i]}
}
