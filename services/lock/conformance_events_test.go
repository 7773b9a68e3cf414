package lock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/subject"
	"github.com/coordkit/coordkit/libs/event"
)

// eventPair is pair with what event tests need: the instances themselves (for metrics) and
// the URL of the NATS server they share, logged in as its publisher.
func eventPair(t *testing.T, bc backendCase) (a, b *instance, natsURL string) {
	open := bc.store(t)
	busA, busB := busPair(t)
	a, b = startInstanceWith(t, bc.name, open(t), busA), startInstanceWith(t, bc.name, open(t), busB)
	a.client, b.client = bc.connectClient(a.url), bc.connectClient(b.url)
	return a, b, publisherURL(busA)
}

// received is one event as a subscriber saw it.
type received struct {
	subject string
	event   *lockv1.LockEvent
}

// subscribeEvents subscribes a separate connection to every lock event of backend, as a user
// would with any NATS client, and returns the channel they arrive on.
func subscribeEvents(t *testing.T, natsURL, backend string) <-chan received {
	t.Helper()
	bus := openBus(t, event.Config{URL: natsURL})
	ch := make(chan received, 64)
	if _, err := bus.Subscribe(subject.LockPattern("*", backend), func(subj string, data []byte) {
		ev := &lockv1.LockEvent{}
		if err := protojson.Unmarshal(data, ev); err != nil {
			t.Errorf("event on %s is not a LockEvent in JSON: %v: %s", subj, err, data)
		}
		ch <- received{subj, ev}
	}); err != nil {
		t.Fatal(err)
	}
	if err := bus.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ch
}

func nextEvent(t *testing.T, ch <-chan received, what string) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("no event within 10s, want %s", what)
	}
	return received{}
}

func noEvent(t *testing.T, ch <-chan received, wait time.Duration, after string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("unexpected event after %s: %s %v", after, r.subject, r.event)
	case <-time.After(wait):
	}
}

// testEvents: a new holder publishes acquired, the last release publishes released, each on
// its documented subject with the lease's token and the holder's id (never the owner
// secret); re-entry and a release that leaves holds publish nothing. The key is one no
// plain subject could carry.
func testEvents(t *testing.T, bc backendCase) {
	a, b, natsURL := eventPair(t, bc)
	events := subscribeEvents(t, natsURL, bc.name)
	ctx := context.Background()
	const key, ttl = "ev.* >:é", 30 * time.Second

	res := must(acquire(ctx, a.client, key, "", ttl, 0))(t)
	lease := res.GetLease()
	holderID := inspect(t, a.client, key).GetHolderId()
	got := nextEvent(t, events, "acquired")
	if want := subject.Lock(subject.Acquired, bc.name, key); got.subject != want {
		t.Fatalf("acquired on %q, want %q", got.subject, want)
	}
	ev := got.event
	if ev.GetKind() != lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED || ev.GetKey() != key || ev.GetBackend() != bc.name ||
		ev.GetFencingToken() != lease.GetFencingToken() || ev.GetHolderId() != holderID || ev.GetHolderId() == "" ||
		!ev.GetExpiresAt().AsTime().Equal(lease.GetExpiresAt().AsTime()) || ev.GetTime() == nil {
		t.Fatalf("acquired event = %v, want key %q, token %d, holder %s, expires_at %v, a time",
			ev, key, lease.GetFencingToken(), holderID, lease.GetExpiresAt().AsTime())
	}

	owner := lease.GetOwner()
	must(acquire(ctx, b.client, key, owner, ttl, 0))(t) // re-entry
	must(b.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: owner}))(t)
	noEvent(t, events, 300*time.Millisecond, "a re-entry and a release that leaves a hold")

	must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: owner, FencingToken: lease.GetFencingToken()}))(t)
	got = nextEvent(t, events, "released")
	if want := subject.Lock(subject.Released, bc.name, key); got.subject != want {
		t.Fatalf("released on %q, want %q", got.subject, want)
	}
	ev = got.event
	if ev.GetKind() != lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED || ev.GetKey() != key ||
		ev.GetFencingToken() != lease.GetFencingToken() || ev.GetHolderId() != holderID {
		t.Fatalf("released event = %v, want token %d, holder %s", ev, lease.GetFencingToken(), holderID)
	}
	noEvent(t, events, 200*time.Millisecond, "the last release")
}

// testNoLostWakeup races releases against waiters across two instances: a holder on one
// instance releases at a random moment around the waiter's first attempt on the other,
// over and over on several keys at once. The holder's ttl is 30s and the periodic re-check
// is off, so a missed release shows as a wait of 30s; every waiter must get the lock within
// a few seconds.
func testNoLostWakeup(t *testing.T, bc backendCase) {
	a, b, _ := eventPair(t, bc)
	const keys, rounds, ttl, bound = 8, 100, 30 * time.Second, 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			key := fmt.Sprint("race-", k)
			for i := range rounds {
				holderC, waiterC := a.client, b.client
				if i%2 == 1 {
					holderC, waiterC = waiterC, holderC
				}
				held, err := acquireWithin(ctx, holderC, key, ttl)
				if err != nil {
					t.Errorf("key %s round %d: holder: %v", key, i, err)
					return
				}
				start := time.Now()
				done := acquireAsync(ctx, waiterC, waitFor(key, ttl, 20*time.Second, false))
				time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
				if _, err := holderC.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}); err != nil {
					t.Errorf("key %s round %d: release: %v", key, i, err)
					return
				}
				r := <-done
				if took := r.at.Sub(start); r.err != nil || !r.res.GetAcquired() {
					t.Errorf("key %s round %d: waiter = %v, %v after %v; want acquired", key, i, r.res, r.err, took)
					return
				} else if took > bound {
					t.Errorf("key %s round %d: the waiter got the lock after %v, want within %v: a wake-up was lost", key, i, took, bound)
				}
				l := r.res.GetLease()
				if _, err := waiterC.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()}); err != nil {
					t.Errorf("key %s round %d: waiter's release: %v", key, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// acquired is the outcome of an Acquire started in the background, and when it came.
type acquired struct {
	res *lockv1.AcquireResponse
	err error
	at  time.Time
}

// acquireAsync sends req through c in the background and returns the channel its outcome
// arrives on.
func acquireAsync(ctx context.Context, c *client.Client, req *lockv1.AcquireRequest) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		res, err := c.Locks().Acquire(ctx, req)
		ch <- acquired{res, err, time.Now()}
	}()
	return ch
}

// waitFor is the request of a waiting Acquire by a fresh owner.
func waitFor(key string, ttl, wait time.Duration, fair bool) *lockv1.AcquireRequest {
	return &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl), Wait: durationpb.New(wait), Fair: fair}
}

// metricSum adds series (as metricValue reads it) over insts.
func metricSum(t *testing.T, series string, insts ...*instance) float64 {
	t.Helper()
	var sum float64
	for _, in := range insts {
		sum += metricValue(t, in.url, series)
	}
	return sum
}

// acquireWithin takes a free key, retrying within a wait as a loaded host may need.
func acquireWithin(ctx context.Context, c *client.Client, key string, ttl time.Duration) (*lockv1.Lease, error) {
	res, err := acquire(ctx, c, key, "", ttl, 20*time.Second)
	if err != nil {
		return nil, err
	}
	if !res.GetAcquired() {
		return nil, fmt.Errorf("free key %q not acquired within 20s: %v", key, res.GetHolder())
	}
	return res.GetLease(), nil
}
