package lock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// expiryLag bounds how long after a lease's end its expired event may come in these tests.
// The promise is 1s; the rest is margin for a loaded 2-core machine (the measured lag is
// logged).
const expiryLag = 4 * time.Second

// reportsExpiries says whether bc's engine publishes expired events. Redlock does not: no
// single step on its independent nodes can decide "exactly once" (see docs/events.md).
func reportsExpiries(bc backendCase) bool { return bc.name != "redlock" }

// collectEvents gathers every event from ch for d, by kind and fencing token.
func collectEvents(ch <-chan received, d time.Duration) map[string][]*lockv1.LockEvent {
	got := map[string][]*lockv1.LockEvent{}
	deadline := time.After(d)
	for {
		select {
		case r := <-ch:
			k := fmt.Sprintf("%s/%s/%d", r.event.GetKey(), r.event.GetKind(), r.event.GetFencingToken())
			got[k] = append(got[k], r.event)
		case <-deadline:
			return got
		}
	}
}

func eventKey(key string, kind lockv1.LockEventKind, token uint64) string {
	return fmt.Sprintf("%s/%s/%d", key, kind, token)
}

// testExpiredEvents: a lease that runs out unreleased produces exactly one expired event,
// with its token and holder, soon after its end, whether nobody takes the lock over (only
// watchers, on both instances, so both race to report it) or waiters on both instances race
// to take it over; a released lease with watchers produces none.
func testExpiredEvents(t *testing.T, bc backendCase) {
	a, b, natsURL := eventPair(t, bc)
	events := subscribeEvents(t, natsURL, bc.name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = time.Second
	watched, released, contended := "exp/watched .>", "exp/released", "exp/contended"
	for _, key := range []string{watched, released} {
		for _, inst := range []*instance{a, b} {
			msgs, _ := watchStream(ctx, t, inst.client.Locks(), &lockv1.WatchRequest{Key: key})
			nextMsg(t, msgs, "the state of "+key) // the watch is in force
		}
	}

	leases := map[string]*lockv1.Lease{}
	for _, key := range []string{watched, released, contended} {
		leases[key] = must(acquire(ctx, a.client, key, "", ttl, 0))(t).GetLease()
	}
	holderID := inspect(t, a.client, watched).GetHolderId()
	must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: released, Owner: leases[released].GetOwner()}))(t)
	var wg sync.WaitGroup
	for _, inst := range []*instance{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := acquire(ctx, inst.client, contended, "", 30*time.Second, 20*time.Second)
			if err != nil || !res.GetAcquired() {
				t.Errorf("waiter on the contended key: %v, %v", res, err)
				return
			}
			_, err = inst.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: contended, Owner: res.GetLease().GetOwner()})
			noErr(t, err)
		}()
	}

	end := leases[watched].GetExpiresAt().AsTime()
	got := collectEvents(events, time.Until(end)+expiryLag+time.Second)
	wg.Wait()
	expired := lockv1.LockEventKind_LOCK_EVENT_KIND_EXPIRED
	if !reportsExpiries(bc) {
		for k, evs := range got {
			if evs[0].GetKind() == expired {
				t.Errorf("%s: %d expired events from an engine documented to publish none", k, len(evs))
			}
		}
		return
	}
	for _, key := range []string{watched, contended} {
		l := leases[key]
		evs := got[eventKey(key, expired, l.GetFencingToken())]
		if len(evs) != 1 {
			t.Fatalf("%q: %d expired events for token %d, want exactly 1 (all events: %v)", key, len(evs), l.GetFencingToken(), got)
		}
		ev := evs[0]
		lag := ev.GetTime().AsTime().Sub(l.GetExpiresAt().AsTime())
		t.Logf("%q: expired event %v after the lease's reported end", key, lag)
		if key == watched && ev.GetHolderId() != holderID || ev.GetBackend() != bc.name || lag > expiryLag {
			t.Errorf("%q: expired event %v, %v after the lease's end; want holder %s within %v", key, ev, lag, holderID, expiryLag)
		}
	}
	if evs := got[eventKey(released, expired, leases[released].GetFencingToken())]; len(evs) != 0 {
		t.Errorf("a released lease produced %d expired events: %v", len(evs), evs)
	}
	for k, evs := range got {
		if evs[0].GetKind() == expired && evs[0].GetKey() == contended && evs[0].GetFencingToken() != leases[contended].GetFencingToken() {
			t.Errorf("%s: the waiters' released leases produced expired events: %v", k, evs)
		}
	}
	// The watchers stay: their instances must not report the same expiry again.
	noEvent(t, events, 1500*time.Millisecond, "the expiries were reported")
}
