package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock/zklock"
)

// TestZooKeeperHolderKilled kills a service instance holding a lock, as kill -9 would look to
// ZooKeeper: its connection is cut for good. Another instance must get the lock once the dead
// instance's session expires, and not one moment before the holder's lease could have ended.
func TestZooKeeperHolderKilled(t *testing.T) {
	t.Parallel()
	const session = 3 * time.Second
	ctx := context.Background()
	root := zkTestRoot(t, testenv.ZooKeeperAddrs())
	proxy := testenv.NewProxy(t, testenv.ZooKeeperAddrs()[0])
	doomed := startInstance(t, "zookeeper", openZK(t, []string{proxy.Addr()}, zklock.Config{Root: root, SessionTimeout: session}))
	survivor := startInstance(t, "zookeeper", openZK(t, testenv.ZooKeeperAddrs(), zklock.Config{Root: root, SessionTimeout: session}))

	// A ttl far beyond the test: only the session's end can free this lock.
	held := must(acquire(ctx, doomed.client, "victim", "", time.Hour, 0))(t).GetLease()
	// The lease promises no more than the session can keep: the ensemble expires a silent
	// session no sooner than its timeout after the last contact, which was this acquire.
	promised := held.GetExpiresAt().AsTime()
	if d := time.Until(promised); d > session || d < session-time.Second {
		t.Fatalf("lease expires in %v, want about the session timeout %v (not the 1h ttl)", d, session)
	}
	cut := time.Now()
	proxy.Cut()

	// The dead instance's service no longer vouches for the lock.
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := doomed.client.Locks().Inspect(ctx, &lockv1.InspectRequest{Key: "victim"})
		if connect.CodeOf(err) == connect.CodeUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inspect through the cut-off instance 2s after the cut: %v, want code unavailable", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	type result struct {
		res *lockv1.AcquireResponse
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		res, err := acquire(ctx, survivor.client, "victim", "", 10*time.Second, 15*time.Second)
		got <- result{res, err, time.Now()}
	}()
	// Meanwhile anyone asking the survivor sees the dead holder until its lease may end.
	for waiting := true; waiting; {
		select {
		case r := <-got:
			if r.err != nil || !r.res.GetAcquired() {
				t.Fatalf("survivor's wait: (%v, %v), want acquired", r.res, r.err)
			}
			if r.at.Before(promised) {
				t.Fatalf("survivor got the lock %v after the cut, before the holder's lease could end (%v after the cut)", r.at.Sub(cut), promised.Sub(cut))
			}
			if limit := session + 3*time.Second; r.at.Sub(cut) > limit {
				t.Fatalf("survivor got the lock %v after the cut, want within the session timeout and some ticks (%v)", r.at.Sub(cut), limit)
			}
			if r.res.GetLease().GetFencingToken() <= held.GetFencingToken() {
				t.Fatalf("survivor's token %d, want above the dead holder's %d", r.res.GetLease().GetFencingToken(), held.GetFencingToken())
			}
			waiting = false
		case <-time.After(100 * time.Millisecond):
			st, err := survivor.client.Locks().Inspect(ctx, &lockv1.InspectRequest{Key: "victim"})
			if err == nil && time.Now().Before(promised) && st.GetState().GetFencingToken() != held.GetFencingToken() {
				t.Fatalf("%v after the cut, inside the dead holder's lease: inspect = %v, want the dead holder (token %d)", time.Since(cut), st.GetState(), held.GetFencingToken())
			}
		}
	}
}

// TestZooKeeperSessionExpired partitions a holding instance from ZooKeeper past its session
// timeout, then heals the partition. While cut off the instance answers unavailable; once
// back, with a new session, the old session's lease is gone and renewing it fails with
// failed_precondition (not held), so the holder knows exactly what happened.
func TestZooKeeperSessionExpired(t *testing.T) {
	t.Parallel()
	const session = 2 * time.Second
	ctx := context.Background()
	root := zkTestRoot(t, testenv.ZooKeeperAddrs())
	proxy := testenv.NewProxy(t, testenv.ZooKeeperAddrs()[0])
	inst := startInstance(t, "zookeeper", openZK(t, []string{proxy.Addr()}, zklock.Config{Root: root, SessionTimeout: session}))
	lease := must(acquire(ctx, inst.client, "k", "", time.Hour, 0))(t).GetLease()
	renew := func() error {
		_, err := inst.client.Locks().Renew(ctx, &lockv1.RenewRequest{Key: "k", Owner: lease.GetOwner(), Ttl: durationpb.New(time.Hour)})
		return err
	}

	proxy.Cut()
	cut := time.Now()
	for err := renew(); connect.CodeOf(err) != connect.CodeUnavailable; err = renew() {
		if time.Since(cut) > 2*time.Second {
			t.Fatalf("renew while cut off from ZooKeeper: %v, want code unavailable", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The ensemble expires the silent session within its timeout plus a tick.
	time.Sleep(session + 2*time.Second)
	proxy.Restore()

	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = renew(); connect.CodeOf(err) != connect.CodeUnavailable {
			break
		}
	}
	wantCode(t, err, connect.CodeFailedPrecondition)
	if st := inspect(t, inst.client, "k"); st.GetHeld() {
		t.Fatalf("after the session expired: %v, want the lock free", st)
	}
	next := must(acquire(ctx, inst.client, "k", "", time.Second, 0))(t)
	if !next.GetAcquired() || next.GetLease().GetFencingToken() <= lease.GetFencingToken() {
		t.Fatalf("acquire after the session expired = %v, want acquired with a token above %d", next, lease.GetFencingToken())
	}
}

// held is a lock the first client holds in TestZooKeeperServerRestart.
type held struct {
	token uint64
	// lost reports whether the holder knows it lost the lock; why says why.
	lost func() bool
	why  func() error
	// renew renews the lease by hand; nil when the SDK's watchdog does.
	renew func() error
}

// TestZooKeeperServerRestart restarts a private ZooKeeper while a lock is held. The lease may
// survive (the ensemble restores sessions from its log) or be reported lost (a renewal fell
// into the outage), but a second client that keeps trying must never hold the lock while the
// first still believes it does.
func TestZooKeeperServerRestart(t *testing.T) {
	t.Parallel()
	const session = 3 * time.Second
	tests := []struct {
		name string
		down time.Duration
		// hold takes the lock through first.
		hold func(t *testing.T, first *client.Client) held
		// wantLost says how the holder must end up; wantSecond whether the second client gets
		// the lock after the restart.
		wantLost, wantSecond bool
	}{
		{
			name: "quick restart keeps the session and the lease",
			down: 0,
			hold: func(t *testing.T, first *client.Client) held {
				lease := must(acquire(context.Background(), first, "k", "", time.Hour, 0))(t).GetLease()
				return held{
					token: lease.GetFencingToken(),
					lost:  func() bool { return false },
					renew: func() error {
						_, err := first.Locks().Renew(context.Background(), &lockv1.RenewRequest{
							Key: "k", Owner: lease.GetOwner(), Ttl: durationpb.New(time.Hour),
						})
						return err
					},
				}
			},
		},
		{
			name: "outage longer than the ttl and the session timeout loses the lease",
			down: 4 * time.Second,
			hold: func(t *testing.T, first *client.Client) held {
				l := must(first.Lock(context.Background(), "k", client.WithTTL(1500*time.Millisecond)))(t)
				t.Cleanup(func() { l.Unlock(context.Background()) })
				lost := func() bool {
					select {
					case <-l.Lost():
						return true
					default:
						return false
					}
				}
				return held{token: l.FencingToken(), lost: lost, why: l.Err}
			},
			wantLost: true, wantSecond: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			server := testenv.StartZooKeeper(t)
			cfg := zklock.Config{Root: "/coordkit/locks", SessionTimeout: session}
			first := startInstance(t, "zookeeper", openZK(t, []string{server.Addr()}, cfg)).client
			second := startInstance(t, "zookeeper", openZK(t, []string{server.Addr()}, cfg)).client
			h := tt.hold(t, first)
			token, lost, renew := h.token, h.lost, h.renew

			// The second client tries all along; the lock may be its only once the first
			// knows it lost it.
			var (
				mu          sync.Mutex
				secondToken uint64
			)
			stop := make(chan struct{})
			checked := make(chan struct{})
			go func() {
				defer close(checked)
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
					res, err := acquire(callCtx, second, "k", "", time.Hour, 0)
					cancel()
					switch {
					case err != nil && connect.CodeOf(err) != connect.CodeUnavailable:
						t.Errorf("second client's try: %v, want busy, or unavailable while ZooKeeper is away", err)
					case err == nil && res.GetAcquired():
						if !lost() {
							t.Errorf("second client got the lock (token %d) while the first still held it (token %d): two holders", res.GetLease().GetFencingToken(), token)
						}
						mu.Lock()
						secondToken = res.GetLease().GetFencingToken()
						mu.Unlock()
						return
					}
				}
			}()
			defer func() {
				close(stop)
				<-checked
			}()

			server.Stop()
			time.Sleep(tt.down)
			server.Start()
			restarted := time.Now()

			if renew != nil {
				// Once the instance has reconnected (the session survived the restart), the
				// lease is still there to renew.
				var err error
				for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
					if err = renew(); connect.CodeOf(err) != connect.CodeUnavailable {
						break
					}
				}
				if err != nil {
					t.Fatalf("renew after the restart: %v, want the lease kept (the session survives a restart)", err)
				}
			}
			// Give the second client time to get the lock if it is free (the lost lease's ttl
			// and the reconnects: the client retries once a second), or to show it cannot.
			window := 3 * time.Second
			if tt.wantSecond {
				window = 6 * time.Second
			}
			for time.Since(restarted) < window {
				mu.Lock()
				done := secondToken != 0
				mu.Unlock()
				if done {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			mu.Lock()
			gotToken := secondToken
			mu.Unlock()

			if lost() != tt.wantLost {
				t.Fatalf("first holder lost = %v, want %v", lost(), tt.wantLost)
			}
			if h.why != nil && tt.wantLost {
				// The watchdog's renewal failed while the service could not reach ZooKeeper.
				if err := h.why(); !errors.Is(err, client.ErrLeaseLost) || connect.CodeOf(err) != connect.CodeUnavailable {
					t.Fatalf("first holder's loss: %v, want ErrLeaseLost with code unavailable", err)
				}
			}
			switch {
			case tt.wantSecond && gotToken == 0:
				t.Fatalf("second client never got the lock within %v of the restart, want it once the lost lease's ttl passed", window)
			case tt.wantSecond && gotToken <= token:
				t.Fatalf("second client's token %d, want above the first's %d", gotToken, token)
			case !tt.wantSecond && gotToken != 0:
				t.Fatalf("second client got the lock (token %d), want the first's lease kept", gotToken)
			}
			if !tt.wantSecond {
				st := inspect(t, second, "k")
				if !st.GetHeld() || st.GetFencingToken() != token {
					t.Fatalf("after the restart: %v, want still held by the first client (token %d)", st, token)
				}
			}
		})
	}
}
