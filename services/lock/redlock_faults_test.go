package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// redlockCluster is three redis-server processes of the test's own (the shared dev nodes must
// never be stopped) and a lock service instance with a redlock backend on them.
type redlockCluster struct {
	nodes  []*testenv.RedisProcess
	prefix string
	inst   *instance
}

func startRedlockCluster(t *testing.T) *redlockCluster {
	t.Helper()
	rc := &redlockCluster{prefix: testenv.Prefix(t)}
	var addrs []string
	for range 3 {
		n := testenv.StartRedis(t)
		rc.nodes = append(rc.nodes, n)
		addrs = append(addrs, n.Addr())
	}
	rc.inst = startInstance(t, "redlock", openRedlock(t, addrs, rc.prefix))
	return rc
}

// lockHashExists says whether node i has key's lock hash, whoever holds it.
func (rc *redlockCluster) lockHashExists(t *testing.T, i int, key string) bool {
	t.Helper()
	n, err := testenv.Redis(t, rc.nodes[i].Addr()).Exists(context.Background(), rc.prefix+":{"+key+"}").Result()
	if err != nil {
		t.Fatalf("node %d: %v", i, err)
	}
	return n == 1
}

// TestRedlockNodeFaults stops nodes under a running service: with a minority down every
// operation still works; with a majority down an acquire fails fast as unavailable and
// nobody holds the lock; once the nodes are back (empty) the lock works again.
func TestRedlockNodeFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		down  int
		works bool
	}{
		{name: "one of three nodes down", down: 1, works: true},
		{name: "two of three nodes down", down: 2, works: false},
		{name: "every node down", down: 3, works: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := startRedlockCluster(t)
			c := rc.inst.client
			lockServes(t, c, "before") // all nodes up

			for _, n := range rc.nodes[:tt.down] {
				n.Stop()
			}
			if tt.works {
				lockServes(t, c, "degraded")
			} else {
				lockUnavailable(t, rc, "degraded")
			}

			for _, n := range rc.nodes[:tt.down] {
				n.Start()
			}
			// Clients notice a restarted node within go-redis's reconnection probe (1s).
			deadline := time.Now().Add(10 * time.Second)
			for {
				res, err := acquire(context.Background(), c, "after", "", time.Second, 0)
				if err == nil && res.GetAcquired() {
					must(c.Locks().Release(context.Background(), &lockv1.ReleaseRequest{Key: "after", Owner: res.GetLease().GetOwner()}))(t)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("acquire after the nodes restarted = %v, %v; want acquired within 10s", res, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			lockServes(t, c, "restarted")
		})
	}
}

// lockServes runs the lock's whole life on key through the service: acquire, re-enter,
// renew, refuse a contender, inspect, release; then the SDK's Lock with its watchdog.
func lockServes(t *testing.T, c *client.Client, key string) {
	t.Helper()
	ctx := context.Background()
	first := must(acquire(ctx, c, key, "", 5*time.Second, 0))(t)
	owner, token := first.GetLease().GetOwner(), first.GetLease().GetFencingToken()
	if !first.GetAcquired() || token == 0 {
		t.Fatalf("%s: acquire = %v, want acquired with a token", key, first)
	}
	re := must(acquire(ctx, c, key, owner, 5*time.Second, 0))(t)
	if !re.GetAcquired() || re.GetLease().GetHoldCount() != 2 || re.GetLease().GetFencingToken() != token {
		t.Fatalf("%s: re-entry = %v, want hold count 2 and token %d", key, re, token)
	}
	renewed := must(c.Locks().Renew(ctx, &lockv1.RenewRequest{Key: key, Owner: owner, Ttl: durationpb.New(10 * time.Second)}))(t)
	if !renewed.GetLease().GetExpiresAt().AsTime().After(re.GetLease().GetExpiresAt().AsTime()) {
		t.Fatalf("%s: renewed lease ends %v, want after %v", key, renewed.GetLease().GetExpiresAt().AsTime(), re.GetLease().GetExpiresAt().AsTime())
	}
	busy := must(acquire(ctx, c, key, "", time.Second, 0))(t)
	if busy.GetAcquired() || busy.GetHolder().GetFencingToken() != token {
		t.Fatalf("%s: contender = %v, want refused naming the holder's token %d", key, busy, token)
	}
	if st := inspect(t, c, key); !st.GetHeld() || st.GetFencingToken() != token || st.GetHoldCount() != 2 {
		t.Fatalf("%s: inspect = %v, want held with token %d and 2 holds", key, st, token)
	}
	for want := uint32(1); ; want-- {
		rel := must(c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: owner}))(t)
		if rel.GetHoldCount() != want {
			t.Fatalf("%s: release = %v, want %d holds left", key, rel, want)
		}
		if want == 0 {
			break
		}
	}

	// Redlock gives a node a tenth of the ttl to answer: 200ms stays enough on a loaded CI
	// host with a node down, where every renewal needs both of the others in time.
	const ttl = 2 * time.Second
	l := must(c.Lock(ctx, key, client.WithTTL(ttl)))(t)
	if l.FencingToken() <= token {
		t.Fatalf("%s: SDK lock token %d, want above %d", key, l.FencingToken(), token)
	}
	select {
	case <-l.Lost():
		t.Fatalf("%s: lease lost while the watchdog renewed it: %v", key, l.Err())
	case <-time.After(2 * ttl): // several renewals
	}
	if _, err := c.TryLock(ctx, key); !errors.Is(err, client.ErrNotAcquired) {
		t.Fatalf("%s: contender TryLock = %v, want ErrNotAcquired", key, err)
	}
	noErr(t, l.Unlock(ctx))
}

// lockUnavailable checks that without a majority an acquire fails fast as unavailable,
// leaves nothing on the nodes still up, and nobody appears to hold the lock.
func lockUnavailable(t *testing.T, rc *redlockCluster, key string) {
	t.Helper()
	ctx := context.Background()
	c := rc.inst.client
	start := time.Now()
	_, err := acquire(ctx, c, key, "", 5*time.Second, 0)
	if took := time.Since(start); took > time.Second {
		t.Errorf("%s: acquire took %v to fail, want under a second", key, took)
	}
	wantCode(t, err, connect.CodeUnavailable)
	if _, err := c.TryLock(ctx, key); errors.Is(err, client.ErrNotAcquired) || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("%s: another owner's TryLock = %v, want unavailable, not a holder", key, err)
	}
	_, err = c.Locks().Inspect(ctx, &lockv1.InspectRequest{Key: key})
	wantCode(t, err, connect.CodeUnavailable)
	for i, n := range rc.nodes {
		if n.Running() && rc.lockHashExists(t, i, key) {
			t.Fatalf("%s: node %d still has the failed acquire's hold", key, i)
		}
	}
}

// TestRedlockHeldLockLosesNodes takes nodes away from under a held lock: the watchdog keeps it
// through the loss of one node, and reports it lost at the loss of a second, after which
// nobody can hold it until the nodes are back.
func TestRedlockHeldLockLosesNodes(t *testing.T) {
	t.Parallel()
	rc := startRedlockCluster(t)
	c := rc.inst.client
	ctx := context.Background()
	// Redlock gives a node a tenth of the ttl to answer, and with a node down every renewal
	// needs both of the others in time: 300ms each, and retries for most of the lease, keep
	// the lease through a starved moment of a loaded CI host (60ms each did not).
	const ttl = 3 * time.Second
	l := must(c.Lock(ctx, "held", client.WithTTL(ttl)))(t)

	rc.nodes[0].Stop()
	select {
	case <-l.Lost():
		t.Fatalf("lease lost with one node of three down: %v", l.Err())
	case <-time.After(2 * ttl):
	}
	if _, err := c.TryLock(ctx, "held"); !errors.Is(err, client.ErrNotAcquired) {
		t.Fatalf("contender TryLock with one node down = %v, want ErrNotAcquired", err)
	}
	if st := inspect(t, c, "held"); !st.GetHeld() || st.GetFencingToken() != l.FencingToken() {
		t.Fatalf("inspect with one node down = %v, want held with token %d", st, l.FencingToken())
	}

	rc.nodes[1].Stop()
	// Renewals fail from now on; the watchdog gives up at its deadline, at most a ttl after the
	// last confirmed renewal, which came before this stop; a second covers late timers.
	within(t, l.Lost(), ttl+time.Second, "Lost after a majority of nodes went down")
	if !errors.Is(l.Err(), client.ErrLeaseLost) || connect.CodeOf(l.Err()) != connect.CodeUnavailable {
		t.Fatalf("Err = %v, want ErrLeaseLost with code unavailable", l.Err())
	}
	_, err := acquire(ctx, c, "held", "", time.Second, 0)
	wantCode(t, err, connect.CodeUnavailable)

	// Restarted empty, the two nodes form a majority again; the third still knows the last
	// token, so the next one is higher.
	rc.nodes[0].Start()
	rc.nodes[1].Start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		next, err := acquire(ctx, c, "held", "", time.Second, 0)
		if err == nil && next.GetAcquired() {
			if next.GetLease().GetFencingToken() <= l.FencingToken() {
				t.Fatalf("token after the restart %d, want above the lost lease's %d", next.GetLease().GetFencingToken(), l.FencingToken())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acquire after the restart = %v, %v; want acquired within 10s", next, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
