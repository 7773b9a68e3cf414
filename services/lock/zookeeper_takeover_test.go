package lock_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock/zklock"
)

// TestZooKeeperRenewThroughAnotherInstance acquires a lock through instance A, takes A away
// and renews through instance B, whose session outlasts A's. Whatever B answers must hold: a
// renewal's expires_at is kept (no other owner gets the lock before it, even once A's session
// has expired), and a refusal is failed_precondition. Renewing through B used to rewrite A's
// node, so the lease still ended with A's session, seconds before the expires_at B reported.
func TestZooKeeperRenewThroughAnotherInstance(t *testing.T) {
	t.Parallel()
	const sessionA, sessionB = 3 * time.Second, 9 * time.Second
	tests := []struct {
		name string
		// kill takes instance A away: its backend and the proxy between it and ZooKeeper.
		kill func(a *zklock.Backend, proxy *testenv.Proxy)
		// wantRenewed says whether B's renewal can succeed: a lease whose session already
		// ended is gone.
		wantRenewed bool
	}{
		{
			name:        "A cut off for good (kill -9)",
			kill:        func(_ *zklock.Backend, proxy *testenv.Proxy) { proxy.Cut() },
			wantRenewed: true,
		},
		{
			name: "A's session closed",
			kill: func(a *zklock.Backend, _ *testenv.Proxy) { a.CloseSession() },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			root := zkTestRoot(t, testenv.ZooKeeperAddrs())
			proxy := testenv.NewProxy(t, testenv.ZooKeeperAddrs()[0])
			backendA := openZK(t, []string{proxy.Addr()}, zklock.Config{Root: root, SessionTimeout: sessionA})
			a := startInstance(t, "zookeeper", backendA)
			b := startInstance(t, "zookeeper", openZK(t, testenv.ZooKeeperAddrs(), zklock.Config{Root: root, SessionTimeout: sessionB}))
			rival := startInstance(t, "zookeeper", openZK(t, testenv.ZooKeeperAddrs(), zklock.Config{Root: root, SessionTimeout: sessionB}))

			// A ttl far beyond the test: only sessions can end this lease.
			held := must(acquire(ctx, a.client, "k", "", time.Hour, 0))(t).GetLease()
			killed := time.Now()
			tt.kill(backendA, proxy)

			res, err := b.client.Locks().Renew(ctx, &lockv1.RenewRequest{Key: "k", Owner: held.GetOwner(), Ttl: durationpb.New(time.Hour)})
			if !tt.wantRenewed {
				wantCode(t, err, connect.CodeFailedPrecondition)
				if got := must(acquire(ctx, rival.client, "k", "", time.Second, 0))(t); !got.GetAcquired() {
					t.Fatalf("rival after the refused renewal: %v, want the lock free", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("renew through B %v after A went: %v, want renewed (A's session is still alive)", time.Since(killed), err)
			}
			lease := res.GetLease()
			if lease.GetFencingToken() != held.GetFencingToken() {
				t.Fatalf("renewed token %d, want the lease's %d", lease.GetFencingToken(), held.GetFencingToken())
			}
			promised := lease.GetExpiresAt().AsTime()
			if d := promised.Sub(killed); d < sessionA+2*time.Second {
				t.Fatalf("renewal promises %v after A went, want past A's session expiry (%v and a tick), so the test can tell", d, sessionA)
			}

			// A rival tries all along, past A's session expiry and up to the promised end.
			tries := 0
			for time.Now().Before(promised) {
				got, err := acquire(ctx, rival.client, "k", "", time.Second, 0)
				at := time.Now()
				tries++
				switch {
				case err != nil:
					t.Fatalf("rival's try %v after A went: %v", at.Sub(killed), err)
				case got.GetAcquired():
					t.Fatalf("rival got the lock %v after A went, %v before the renewed lease's expires_at (A's session timeout: %v)",
						at.Sub(killed), promised.Sub(at), sessionA)
				case got.GetHolder().GetFencingToken() != held.GetFencingToken():
					t.Fatalf("rival sees holder token %d, want the lease's %d", got.GetHolder().GetFencingToken(), held.GetFencingToken())
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("rival tried %d times in %v", tries, time.Since(killed))

			// B holds the lease now: it releases it, and the rival's next token is higher.
			rel, err := b.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "k", Owner: held.GetOwner()})
			if err != nil || !rel.GetReleased() || rel.GetHoldCount() != 0 {
				t.Fatalf("release through B = (%v, %v), want released", rel, err)
			}
			got := must(acquire(ctx, rival.client, "k", "", time.Second, 0))(t)
			if !got.GetAcquired() || got.GetLease().GetFencingToken() <= held.GetFencingToken() {
				t.Fatalf("rival after the release: %v, want acquired with a token above %d", got, held.GetFencingToken())
			}
		})
	}
}
