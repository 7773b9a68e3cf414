package lock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/testenv"
)

// testWatchdogKeepsLock holds a lock for several leases while another owner keeps trying,
// with one slow moment in the middle: right after a renewal the holder's network holds all
// traffic until a quarter of a lease before the holder's deadline (about 65% into the lease),
// so the next renewal (due at a third) takes more than a renewal interval to answer, longer
// than a fixed per-try timeout of one interval would allow (what failed CI on a loaded host)
// but inside the lease. The watchdog must ride it out and the rival never get in. The ttl is
// 4s so that Redlock's per-node timeout (a tenth of it) survives an overloaded CI host, and
// the renewal after the slow moment has a second, on the holder's own deadline, to get
// through (450ms, reckoned on the service's clock, were missed on a CI host at a load of 18).
func testWatchdogKeepsLock(t *testing.T, bc backendCase) {
	rig := newWatchdogRig(t, bc)
	ctx := context.Background()
	const ttl = 4 * time.Second
	l := must(rig.holder.Lock(ctx, "dog", client.WithTTL(ttl)))(t)
	stopRivals := watchRivals(t, rig.rival, "dog")
	defer stopRivals()

	renewed := awaitRenewal(t, l, 10*ttl)
	rig.proxy.Stall()
	time.Sleep(time.Until(l.Deadline().Add(-ttl / 4)))
	rig.proxy.Resume()

	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		select {
		case <-l.Lost():
			t.Fatalf("lease lost while the service was up: %v", l.Err())
		case <-time.After(ttl / 4):
		}
	}
	stopRivals()
	if exp := l.ExpiresAt(); !exp.After(renewed) {
		t.Fatalf("expiry %v not moved past the slow moment's lease (%v): the watchdog stopped renewing", exp, renewed)
	}
	if st := inspect(t, rig.rival, "dog"); st.GetFencingToken() != l.FencingToken() {
		t.Fatalf("token changed to %d while held with %d", st.GetFencingToken(), l.FencingToken())
	}
	noErr(t, l.Unlock(ctx))
	if !errors.Is(context.Cause(l.Context()), client.ErrUnlocked) {
		t.Fatalf("context cause after Unlock = %v, want ErrUnlocked", context.Cause(l.Context()))
	}
}

// testLostWhenServiceUnreachable cuts the holder off from the service for good, with
// connections refused or with every packet held, and checks the documented bound: Lost
// closes no earlier than Deadline (the watchdog keeps trying while it could still renew) and
// never after ExpiresAt (after it the service may hand the lock to another owner while the
// holder still works under it).
func testLostWhenServiceUnreachable(t *testing.T, bc backendCase) {
	tests := []struct {
		name      string
		cut       func(p *testenv.Proxy)
		wantCodes []connect.Code // of the last failed renewal, carried by Err
	}{
		// A reset connection is unavailable, or canceled: connect-go reads ECONNRESET and
		// EPIPE as the peer going away.
		{"connections refused", (*testenv.Proxy).Cut, []connect.Code{connect.CodeUnavailable, connect.CodeCanceled}},
		{"no answer", (*testenv.Proxy).Stall, []connect.Code{connect.CodeDeadlineExceeded}},
	}
	for _, tt := range tests {
		// One after the other, in the row's own slot of the table: as parallel subtests they
		// queued behind -parallel's two and made the table's last minute.
		t.Run(tt.name, func(t *testing.T) {
			rig := newWatchdogRig(t, bc)
			const ttl = 3 * time.Second // Redlock gives a node a tenth of it: enough on an overloaded CI host
			l := must(rig.holder.Lock(context.Background(), "cut", client.WithTTL(ttl)))(t)
			awaitRenewal(t, l, 10*ttl) // check the bound on a renewed lease, not only a fresh one
			gauge := oversleepGauge()
			tt.cut(rig.proxy)
			select {
			case <-l.Lost():
			case <-time.After(10 * ttl):
				gauge()
				t.Fatalf("Lost not closed %v after the service became unreachable (expiry %v)", 10*ttl, l.ExpiresAt())
			}
			lostAt := time.Now()
			wantLossWithin(t, lostAt, l.Deadline(), l.ExpiresAt(), gauge())

			if !errors.Is(l.Err(), client.ErrLeaseLost) || !errors.Is(context.Cause(l.Context()), client.ErrLeaseLost) {
				t.Fatalf("Err = %v, cause = %v; want ErrLeaseLost", l.Err(), context.Cause(l.Context()))
			}
			if got := connect.CodeOf(l.Err()); !slices.Contains(tt.wantCodes, got) {
				t.Fatalf("Err = %v (code %v), want the last renewal's code, one of %v", l.Err(), got, tt.wantCodes)
			}
			if err := unlockQuietly(l); !errors.Is(err, client.ErrLeaseLost) {
				t.Fatalf("Unlock after loss = %v, want ErrLeaseLost", err)
			}
		})
	}
}

// wantLossWithin checks when Lost closed against the lease it gave up: not before the SDK's
// deadline (the last confirmed send + granted span - margin), and never after the reported
// expiry itself (the service runs on this host's clock here). Between the two is a late
// timer on a loaded host, allowed because the lock is still the holder's; after the expiry
// it is not, and the message says whether the whole runtime was starved (oversleep: the
// worst lateness of the test's own short sleeps meanwhile) or the watchdog was late by
// itself.
func wantLossWithin(t *testing.T, lostAt, deadline, expiry time.Time, oversleep time.Duration) {
	t.Helper()
	margin := expiry.Sub(deadline)
	switch {
	case lostAt.After(expiry):
		why := "the runtime was not starved, so the watchdog itself is late: a bug"
		if oversleep > margin {
			why = "the test's own sleeps were that late too: the host was too starved for the margin; still a failure, because another owner could have held the lock"
		}
		t.Fatalf("Lost closed %v AFTER the lease's reported expiry %v (deadline %v, %v before it); the test's 5ms sleeps overslept by up to %v: %s",
			lostAt.Sub(expiry), expiry.Format(time.StampMicro), deadline.Format(time.StampMicro), margin, oversleep, why)
	case lostAt.Before(deadline.Add(-5 * time.Millisecond)):
		t.Fatalf("Lost closed %v before its deadline %v (%v before the expiry %v): the watchdog gave up while it could still renew the lease",
			deadline.Sub(lostAt), deadline.Format(time.StampMicro), margin, expiry.Format(time.StampMicro))
	case lostAt.After(deadline):
		t.Logf("Lost closed %v after its deadline, %v before the expiry: a late timer on a loaded host (the test's own sleeps overslept by up to %v)",
			lostAt.Sub(deadline), expiry.Sub(lostAt), oversleep)
	}
}
