package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// watchdogBehaviours are the SDK watchdog's promises beyond the conformance rows
// WatchdogKeepsLock and LostWhenServiceUnreachable, run through the real service on every
// backend.
var watchdogBehaviours = []struct {
	name string
	run  func(t *testing.T, bc backendCase)
}{
	{"SurvivesTransientOutage", testSurvivesTransientOutage},
	{"SurvivesHungConnection", testSurvivesHungConnection},
	{"LostAtOnceWhenGone", testLostAtOnceWhenGone},
	{"UnlockDuringHungRenewal", testUnlockDuringHungRenewal},
	{"IgnoresServiceClock", testIgnoresServiceClock},
}

func TestWatchdog(t *testing.T) {
	t.Parallel()
	for _, bc := range backends {
		for _, b := range watchdogBehaviours {
			t.Run(bc.name+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				b.run(t, bc)
			})
		}
	}
}

// testSurvivesTransientOutage cuts the holder off right after a renewal until 600ms into its
// 1s lease, past the next renewal and past what a per-try timeout of one interval allows, but
// short of the lease: the watchdog must keep retrying, renew once the network is back, and
// the rival must never get the lock meanwhile.
func testSurvivesTransientOutage(t *testing.T, bc backendCase) {
	tests := []struct {
		name       string
		down, back func(p *testenv.Proxy)
	}{
		{"connections refused", (*testenv.Proxy).Cut, (*testenv.Proxy).Restore},
		{"traffic held", (*testenv.Proxy).Stall, (*testenv.Proxy).Resume},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rig := newWatchdogRig(t, bc)
			const ttl = 3 * time.Second // Redlock gives a node a tenth of it: enough on an overloaded CI host
			l := must(rig.holder.Lock(context.Background(), "blip", client.WithTTL(ttl)))(t)
			defer unlockQuietly(l)
			stopRivals := watchRivals(t, rig.rival, "blip")
			defer stopRivals()

			renewed := awaitRenewal(t, l, 10*ttl)
			tt.down(rig.proxy)
			time.Sleep(time.Until(renewed.Add(-ttl + ttl*6/10)))
			tt.back(rig.proxy)

			again := awaitRenewal(t, l, 10*ttl) // fails the test if the lease was lost
			if !again.After(renewed) {
				t.Fatalf("expiry after the outage %v, want past %v", again, renewed)
			}
			select {
			case <-l.Lost():
				t.Fatalf("lease lost after the outage: %v", l.Err())
			case <-time.After(ttl): // a few more renewals
			}
			stopRivals()
			if st := inspect(t, rig.rival, "blip"); !st.GetHeld() || st.GetFencingToken() != l.FencingToken() {
				t.Fatalf("after the outage: %v, want still held with token %d", st, l.FencingToken())
			}
			noErr(t, unlockQuietly(l))
		})
	}
}

// testSurvivesHungConnection hangs the holder's open connections for good right after a
// renewal, while new connections work, as when a NAT or load balancer drops a flow's state:
// the renewal sent on the hung connection never answers, so the watchdog must get another
// try through on a fresh connection before the deadline, and keep the lease from then on.
func testSurvivesHungConnection(t *testing.T, bc backendCase) {
	rig := newWatchdogRig(t, bc)
	const ttl = 3 * time.Second // Redlock gives a node a tenth of it: enough on an overloaded CI host
	l := must(rig.holder.Lock(context.Background(), "hung", client.WithTTL(ttl)))(t)
	defer unlockQuietly(l)
	stopRivals := watchRivals(t, rig.rival, "hung")
	defer stopRivals()

	renewed := awaitRenewal(t, l, 10*ttl)
	rig.proxy.StallOpen()
	for range 3 {
		renewed = awaitRenewal(t, l, 10*ttl) // fails the test if the lease was lost
	}
	stopRivals()
	if st := inspect(t, rig.rival, "hung"); !st.GetHeld() || st.GetFencingToken() != l.FencingToken() {
		t.Fatalf("after renewing past a hung connection until %v: %v, want still held with token %d", renewed, st, l.FencingToken())
	}
	noErr(t, unlockQuietly(l))
}

// testLostAtOnceWhenGone takes the lease away on the service side while the holder's
// network is fine: the service's answer to the next renewal must close Lost then, long before
// the deadline a mere outage would wait for, because the guarded work no longer holds the
// lock.
func testLostAtOnceWhenGone(t *testing.T, bc backendCase) {
	tests := []struct {
		name string
		// take ends the lease behind the holder's back, through the rival's instance.
		take     func(t *testing.T, rival *client.Client, key, owner string)
		wantCode connect.Code
		// rivalHolds says whether the rival holds the lock afterwards.
		rivalHolds bool
	}{
		{
			name: "released behind its back",
			take: func(t *testing.T, rival *client.Client, key, owner string) {
				must(rival.Locks().Release(context.Background(), &lockv1.ReleaseRequest{Key: key, Owner: owner}))(t)
			},
			wantCode: connect.CodeFailedPrecondition,
		},
		{
			name: "taken by another owner",
			take: func(t *testing.T, rival *client.Client, key, owner string) {
				must(rival.Locks().Release(context.Background(), &lockv1.ReleaseRequest{Key: key, Owner: owner}))(t)
				if res := must(acquire(context.Background(), rival, key, "", time.Minute, 0))(t); !res.GetAcquired() {
					t.Fatalf("rival's acquire of the released lock = %v, want acquired", res)
				}
			},
			wantCode:   connect.CodePermissionDenied,
			rivalHolds: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rig := newWatchdogRig(t, bc)
			// Renewals every second, deadline 2.7s into the lease: Lost by 2s means the
			// answer ended it, not the deadline.
			const ttl = 3 * time.Second
			l := must(rig.holder.Lock(context.Background(), "gone", client.WithTTL(ttl)))(t)
			expiry := l.ExpiresAt()
			tt.take(t, rig.rival, "gone", l.Owner())
			select {
			case <-l.Lost():
			case <-time.After(time.Until(expiry.Add(-ttl / 3))):
				t.Fatalf("Lost still open %v before the expiry %v (deadline %v before it): the service's answer must end the lease at once",
					ttl/3, expiry.Format(time.StampMicro), l.SafetyMargin())
			}
			if !errors.Is(l.Err(), client.ErrLeaseLost) || connect.CodeOf(l.Err()) != tt.wantCode {
				t.Fatalf("Err = %v, want ErrLeaseLost with code %v", l.Err(), tt.wantCode)
			}
			if err := unlockQuietly(l); !errors.Is(err, client.ErrLeaseLost) {
				t.Fatalf("Unlock after the loss = %v, want ErrLeaseLost", err)
			}
			st := inspect(t, rig.rival, "gone")
			if st.GetHeld() != tt.rivalHolds || (tt.rivalHolds && st.GetFencingToken() <= l.FencingToken()) {
				t.Fatalf("after the loss and Unlock: %v, want held=%v by a newer token than %d (Unlock must not free another owner's lock)",
					st, tt.rivalHolds, l.FencingToken())
			}
		})
	}
}

// testUnlockDuringHungRenewal unlocks while a renewal hangs on a stalled network and the
// release hangs too, past the lease's deadline and expiry: the caller gave the lock up, so
// none of it is a loss. Unlock reports the release's own failure; Err stays nil and the
// context's cause is ErrUnlocked.
func testUnlockDuringHungRenewal(t *testing.T, bc backendCase) {
	rig := newWatchdogRig(t, bc)
	const ttl = 3 * time.Second // Redlock gives a node a tenth of it: enough on an overloaded CI host
	l := must(rig.holder.Lock(context.Background(), "hang", client.WithTTL(ttl)))(t)
	renewed := awaitRenewal(t, l, 10*ttl)
	rig.proxy.Stall()
	time.Sleep(time.Until(renewed.Add(-ttl + ttl*45/100))) // the next renewal is out
	ctx, cancel := context.WithDeadline(context.Background(), renewed.Add(200*time.Millisecond))
	defer cancel()
	err := l.Unlock(ctx)
	if errors.Is(err, client.ErrLeaseLost) || connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("Unlock with the release stalled past the expiry = %v, want the release's deadline_exceeded, not a loss", err)
	}
	select {
	case <-l.Lost():
		t.Fatalf("Lost closed after Unlock: %v", l.Err())
	default:
	}
	if l.Err() != nil || !errors.Is(context.Cause(l.Context()), client.ErrUnlocked) {
		t.Fatalf("after Unlock: Err = %v, cause = %v; want nil and ErrUnlocked", l.Err(), context.Cause(l.Context()))
	}
	rig.proxy.Resume()
}

// skewedClock is a client interceptor that moves every expires_at the holder is told by
// skew, as a service whose wall clock is skew ahead of the holder's (a holder whose clock
// is behind) would report it; expires_after, a span, is left as it is.
func skewedClock(skew time.Duration) connect.UnaryInterceptorFunc {
	shift := func(l *lockv1.Lease) {
		if l.GetExpiresAt() != nil {
			l.ExpiresAt = timestamppb.New(l.GetExpiresAt().AsTime().Add(skew))
		}
	}
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if err != nil {
				return res, err
			}
			switch m := res.Any().(type) {
			case *lockv1.AcquireResponse:
				shift(m.GetLease())
			case *lockv1.RenewResponse:
				shift(m.GetLease())
			case *lockv1.BatchResponse:
				for _, r := range m.GetResults() {
					shift(r.GetAcquire().GetLease())
					shift(r.GetRenew().GetLease())
				}
			}
			return res, nil
		}
	}
}

// testIgnoresServiceClock runs a holder whose clock is 5s behind the service's, and one 5s
// ahead, and cuts it off after a renewal: its Deadline stays where the send times and the
// granted spans put it (not where the skewed expires_at would), so the lease is kept while
// the service is up, and Lost closes before the real expiry and before a rival, trying
// all along, gets the lock. Reckoned from expires_at, the first holder would believe in
// its lease 5s after the rival took it, and the second would give up at once.
func testIgnoresServiceClock(t *testing.T, bc backendCase) {
	for _, skew := range []time.Duration{5 * time.Second, -5 * time.Second} {
		t.Run(fmt.Sprintf("service clock %+v", skew), func(t *testing.T) {
			t.Parallel()
			rig := newWatchdogRig(t, bc, client.WithConnectOptions(connect.WithInterceptors(skewedClock(skew))))
			const ttl = 3 * time.Second // Redlock gives a node a tenth of it: enough on an overloaded CI host
			ctx := context.Background()
			l := must(rig.holder.Lock(ctx, "skew", client.WithTTL(ttl)))(t)
			defer unlockQuietly(l)
			awaitRenewal(t, l, 10*ttl) // fails the test if the lease was lost with the service up

			end := inspect(t, rig.rival, "skew").GetExpiresAt().AsTime()
			if d := l.ExpiresAt().Sub(end) - skew; d.Abs() > ttl/2 {
				t.Fatalf("holder told expiry %v, the service's is %v: the interceptor did not move it by %v", l.ExpiresAt(), end, skew)
			}
			rig.proxy.Stall()
			rivalAt := make(chan time.Time, 1)
			go func() {
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					res, err := acquire(ctx, rig.rival, "skew", "", ttl, 0)
					cancel()
					if err == nil && res.GetAcquired() {
						rivalAt <- time.Now()
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			var lostAt time.Time
			select {
			case <-l.Lost():
				lostAt = time.Now()
			case at := <-rivalAt:
				t.Fatalf("the rival got the lock %v before the holder's Lost closed (its Deadline %v ahead, ExpiresAt %v)",
					time.Since(at), time.Until(l.Deadline()), l.ExpiresAt())
			case <-time.After(10 * ttl):
				t.Fatalf("Lost not closed %v after the cut", 10*ttl)
			}
			// The last confirmed lease's real end, on the service (the rival's Inspect, its
			// holder's lease unless already expired): the deadline did not move by the skew.
			if st := inspect(t, rig.rival, "skew"); st.GetFencingToken() == l.FencingToken() {
				end = st.GetExpiresAt().AsTime()
			}
			if d := end.Sub(l.Deadline()); d < l.SafetyMargin()-5*time.Millisecond || d > ttl*2/3 {
				t.Fatalf("Deadline %v before the service's expiry, want the margin %v plus at most the round trip: it moved with the skewed clock",
					d, l.SafetyMargin())
			}
			if lostAt.After(end) {
				t.Fatalf("Lost closed %v after the lease's real expiry", lostAt.Sub(end))
			}
			select {
			case at := <-rivalAt:
				if at.Before(lostAt) {
					t.Fatalf("the rival got the lock %v before Lost closed", lostAt.Sub(at))
				}
			case <-time.After(10 * ttl):
				t.Fatal("the rival never got the expired lock")
			}
		})
	}
}
