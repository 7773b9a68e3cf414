package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock/zklock"
)

// TestZooKeeperStorageBounded locks many distinct per-entity keys and ends their leases every
// way a line can empty: releases (whose caller removes the key's parent at once) and the end
// of the holding instance's session (which removes the lease nodes and nobody's call sees the
// line empty). Afterwards the tree under the root must be back to O(1) nodes, and a reused
// key's fencing token must still rise.
//
// Key parents are container nodes, which the ensemble removes on its own container sweep; the
// private server sweeps every 200ms instead of every minute, so the test need not wait. It
// does not run in parallel: the sweep interval reaches the server through the environment.
func TestZooKeeperStorageBounded(t *testing.T) {
	t.Setenv("SERVER_JVMFLAGS", "-Dznode.container.checkIntervalMs=200")
	server := testenv.StartZooKeeper(t)
	ctx := context.Background()
	const root, keys = "/coordkit/locks", 300
	cfg := zklock.Config{Root: root, SessionTimeout: 4 * time.Second}
	b := openZK(t, []string{server.Addr()}, cfg)

	first, err := b.TryAcquire(ctx, "order:reused", "o", time.Minute)
	if err != nil || !first.Acquired {
		t.Fatalf("acquire order:reused = (%+v, %v)", first, err)
	}
	for i := range keys {
		key := fmt.Sprintf("order:%d", i)
		if att, err := b.TryAcquire(ctx, key, "o", time.Minute); err != nil || !att.Acquired {
			t.Fatalf("acquire %s = (%+v, %v)", key, att, err)
		}
		if _, _, err := b.Release(ctx, key, "o", 0); err != nil {
			t.Fatalf("release %s: %v", key, err)
		}
	}
	// An instance that holds locks when its session ends (it exits, or is cut off for the
	// session timeout): ZooKeeper deletes its lease nodes; nobody releases anything.
	doomed := openZK(t, []string{server.Addr()}, cfg)
	for i := range keys {
		key := fmt.Sprintf("item:%d", i)
		if att, err := doomed.TryAcquire(ctx, key, "o", time.Minute); err != nil || !att.Acquired {
			t.Fatalf("acquire %s = (%+v, %v)", key, att, err)
		}
	}
	if _, _, err := b.Release(ctx, "order:reused", "o", 0); err != nil {
		t.Fatalf("release order:reused: %v", err)
	}
	doomed.CloseSession() // as its session expiring would, without waiting for it

	conn, _, err := zk.Connect([]string{server.Addr()}, 5*time.Second, zk.WithLogger(discardZK{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Left: the clock probe, nothing per key.
	const want = 1
	var n int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if n, err = countBelow(conn, root); err == nil && n <= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys used once and freed left %d nodes under %s (err %v), want %d", 2*keys+1, n, root, err, want)
		}
	}

	again, err := b.TryAcquire(ctx, "order:reused", "o", time.Minute)
	if err != nil || !again.Acquired || again.Lease.FencingToken <= first.Lease.FencingToken {
		t.Fatalf("reacquire order:reused after its parent was reclaimed = (%+v, %v), want a token above %d", again, err, first.Lease.FencingToken)
	}
}

// countBelow counts the nodes below path.
func countBelow(conn *zk.Conn, path string) (int, error) {
	kids, _, err := conn.Children(path)
	if err != nil {
		return 0, err
	}
	n := len(kids)
	for _, k := range kids {
		m, err := countBelow(conn, path+"/"+k)
		if err != nil && err != zk.ErrNoNode {
			return 0, err
		}
		n += m
	}
	return n, nil
}
