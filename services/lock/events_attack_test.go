package lock_test

// Attacks on push wake-up and fair mode that once found holes (each failed before its fix):
// a renewal's expiry guess swallowing the real release, a forged event token silencing a
// line, a fair waiter leaving a free lock with nobody woken, an owner named like the Redis
// line's counter, and InnoDB gap-lock deadlocks between neighbouring keys' lines.

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/subject"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/services/lock"
)

// TestAttackRenewPoisonsWakeDedup: two plain waiters on one instance wait for a holder
// that renews its lease (as every watchdog does). At the holder's first reported expiry the
// second waiter's expiry timer fires and wakes the head "for" the holder's fencing token; the
// holder then releases, and the release (same token) is dropped as an echo. The head only
// tries again at the renewed expiry, long after the release. Recheck is off.
func TestAttackRenewPoisonsWakeDedup(t *testing.T) {
	t.Parallel()
	bc := backends[0] // redis
	a, _, _ := eventPair(t, bc)
	const key = "renewed"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := must(acquireWithin(ctx, a.client, key, 2*time.Second))(t)
	first := acquireAsync(ctx, a.client, waitFor(key, 30*time.Second, 40*time.Second, false))
	second := acquireAsync(ctx, a.client, waitFor(key, 30*time.Second, 40*time.Second, false))
	inLine(t, bc.name, 2, a)
	time.Sleep(500 * time.Millisecond)
	// The holder's watchdog renews before the 2s lease runs out.
	must(a.client.Locks().Renew(ctx, &lockv1.RenewRequest{Key: key, Owner: held.GetOwner(), Ttl: durationpb.New(15 * time.Second)}))(t)
	time.Sleep(2500 * time.Millisecond) // past the first reported expiry: the waiters' timers fire
	must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}))(t)
	released := time.Now()
	var r acquired
	rest := second // the waiter still waiting after the head got the lock
	select {
	case r = <-first:
	case r = <-second:
		rest = first
	}
	if r.err != nil || !r.res.GetAcquired() {
		t.Fatalf("waiter = %v, %v", r.res, r.err)
	}
	if took := r.at.Sub(released); took > 3*time.Second {
		t.Fatalf("the head got the released lock %v after the release (the holder's renewed expiry), want well under 3s: the release's wake-up was dropped as an echo", took)
	}
	l := r.res.GetLease()
	must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()}))(t)
	<-rest
}

// slowQueue delays fair attempts while delay is set, as a loaded backend would.
type slowQueue struct {
	lock.QueueBackend
	delay atomic.Int64
}

func (s *slowQueue) TryAcquireFair(ctx context.Context, key, owner string, ttl, entryTTL time.Duration) (lock.Attempt, error) {
	if d := time.Duration(s.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return lock.Attempt{}, context.Cause(ctx)
		}
	}
	return s.QueueBackend.TryAcquireFair(ctx, key, owner, ttl, entryTTL)
}

// TestAttackFairLeaveWakesNobody: fair waiter R (instance B) is first in line, F (instance
// A) second. The holder releases; F, woken at once, finds R ahead and waits; R gives up
// (its caller cancels during its slow attempt) and leaves the line. The lock is now free
// and F is first, but nothing tells F: it waits for its entry renewal (a third of the entry
// lease), with Recheck off.
func TestAttackFairLeaveWakesNobody(t *testing.T) {
	t.Parallel()
	bc := backends[0] // redis
	open := bc.store(t)
	busA, busB := busPair(t)
	const entryTTL = 15 * time.Second
	a := serveLock(t, lock.Config{Backends: map[string]lock.Backend{bc.name: open(t)}, Events: busA, Recheck: -1, FairEntryTTL: entryTTL})
	slow := &slowQueue{QueueBackend: open(t).(lock.QueueBackend)}
	b := serveLock(t, lock.Config{Backends: map[string]lock.Backend{bc.name: slow}, Events: busB, Recheck: -1, FairEntryTTL: entryTTL})
	const key = "fair-leave"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := must(acquireWithin(ctx, a.client, key, time.Minute))(t)
	rCtx, rCancel := context.WithCancel(ctx)
	rDone := make(chan error, 1)
	go func() {
		_, err := acquireFair(rCtx, b.client, key, time.Minute, 40*time.Second)
		rDone <- err
	}()
	inLine(t, bc.name, 1, a, b)
	fDone := acquireAsync(ctx, a.client, waitFor(key, time.Minute, 40*time.Second, true))
	inLine(t, bc.name, 2, a, b)
	slow.delay.Store(int64(500 * time.Millisecond))
	must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}))(t)
	time.Sleep(150 * time.Millisecond) // R is inside its (slow) attempt
	rCancel()
	<-rDone
	left := time.Now()
	r := <-fDone
	if r.err != nil || !r.res.GetAcquired() {
		t.Fatalf("F = %v, %v", r.res, r.err)
	}
	if took := r.at.Sub(left); took > 3*time.Second {
		t.Fatalf("F, first in line for a free lock, got it %v after the waiter ahead left: nothing woke it", took)
	}
}

// TestAttackForgedTokenWedgesLine: any NATS client (or another deployment sharing the NATS
// with the same backend name) publishes one released event for a key with a huge fencing
// token. The line's dedup remembers it, so every genuine release of that key afterwards is
// dropped as an "echo" while the line exists: the waiter gets the released lock only at the
// holder's expiry. Recheck is off.
func TestAttackForgedTokenWedgesLine(t *testing.T) {
	t.Parallel()
	bc := backends[0] // redis
	a, _, natsURL := eventPair(t, bc)
	const key = "forged"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := must(acquireWithin(ctx, a.client, key, 12*time.Second))(t)
	done := acquireAsync(ctx, a.client, waitFor(key, 30*time.Second, 40*time.Second, false))
	inLine(t, bc.name, 1, a)
	hostile := openBus(t, event.Config{URL: natsURL})
	noErr(t, hostile.Publish(subject.Lock(subject.Released, bc.name, key), &lockv1.LockEvent{Key: key, Backend: bc.name, FencingToken: math.MaxUint64}))
	noErr(t, hostile.Flush(ctx))
	time.Sleep(300 * time.Millisecond)
	must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}))(t)
	released := time.Now()
	r := <-done
	if r.err != nil || !r.res.GetAcquired() {
		t.Fatalf("waiter = %v, %v", r.res, r.err)
	}
	if took := r.at.Sub(released); took > 3*time.Second {
		t.Fatalf("the waiter got the released lock %v after the release (at the holder's expiry): one forged event disabled the key's wake-ups", took)
	}
}

// TestAttackFairOwnerNamedSeq: on redis the line's arrival counter is the field '#seq' of
// the same hash that keeps each owner's entry deadline, under the owner's name. An owner
// named "#seq" (any valid owner string) overwrites the counter when it queues, and deletes
// it when it leaves the line; the next waiter then draws arrival 1 again and is served
// before waiters that queued long before it.
func TestAttackFairOwnerNamedSeq(t *testing.T) {
	t.Parallel()
	bc := backends[0] // redis
	a, _, _ := eventPair(t, bc)
	const key, ttl = "seq", 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := must(acquireWithin(ctx, a.client, key, ttl))(t)
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	wait := func(name string) {
		wg.Go(func() {
			res, err := acquireFair(ctx, a.client, key, ttl, 40*time.Second)
			if err != nil || !res.GetAcquired() {
				t.Errorf("%s = %v, %v", name, res, err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			l := res.GetLease()
			time.Sleep(10 * time.Millisecond)
			must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()}))(t)
		})
	}
	wait("first")
	inLine(t, bc.name, 1, a)
	wait("second")
	inLine(t, bc.name, 2, a)
	// A waiter whose owner starts with "#seq" queues and gives up. (Owners reach the line as
	// digests, so none can name the counter any more; this stays as a regression check.)
	res, err := a.client.Locks().Acquire(ctx, &lockv1.AcquireRequest{Key: key, Owner: "#seq#seq#seq#seq", Ttl: durationpb.New(ttl), Wait: durationpb.New(300 * time.Millisecond), Fair: true})
	if err != nil || res.GetAcquired() {
		t.Fatalf("#seq waiter = %v, %v", res, err)
	}
	time.Sleep(200 * time.Millisecond) // its leaving reaches redis
	wait("third")
	inLine(t, bc.name, 4, a)
	must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: holder.GetOwner(), FencingToken: holder.GetFencingToken()}))(t)
	wg.Wait()
	if fmt.Sprint(order) != "[first second third]" {
		t.Fatalf("fair waiters got the lock in the order %v, want [first second third]", order)
	}
}

// TestAttackMySQLFairGapDeadlocks: fair waiters joining and leaving the lines of different
// keys (each held by someone, so nobody is granted anything) on a healthy MariaDB. The
// waiters table's gap locks make the transactions of neighbouring keys deadlock, and
// TryAcquireFair gives up after 10 deadlocks in a row with ErrUnavailable.
func TestAttackMySQLFairGapDeadlocks(t *testing.T) {
	t.Parallel()
	open := mysqlStore(t)
	bs := []lock.QueueBackend{open(t).(lock.QueueBackend), open(t).(lock.QueueBackend)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const keys = 24
	for k := range keys {
		att, err := bs[0].TryAcquireFair(ctx, fmt.Sprintf("k%02d", k), "holder", time.Minute, 5*time.Second)
		if err != nil || !att.Acquired {
			t.Fatalf("holder: %+v %v", att, err)
		}
	}
	run, stop := context.WithTimeout(ctx, 8*time.Second)
	defer stop()
	var errs sync.Map
	var nerr, nops atomic.Int64
	var wg sync.WaitGroup
	for k := range keys {
		for w := range 6 {
			wg.Go(func() {
				b := bs[w%2]
				key := fmt.Sprintf("k%02d", k)
				for i := 0; run.Err() == nil; i++ {
					owner := fmt.Sprintf("o-%d-%d-%d", k, w, i)
					nops.Add(1)
					if _, err := b.TryAcquireFair(ctx, key, owner, 5*time.Second, 5*time.Second); err != nil {
						nerr.Add(1)
						errs.Store("TryAcquireFair: "+err.Error(), true)
					}
					if err := b.LeaveQueue(ctx, key, owner); err != nil {
						nerr.Add(1)
						errs.Store("LeaveQueue: "+err.Error(), true)
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d join+leave rounds, %d failed", nops.Load(), nerr.Load())
	errs.Range(func(k, _ any) bool { t.Logf("%v", k); return true })
	if nerr.Load() > 0 {
		t.Fatalf("%d calls failed with the database healthy", nerr.Load())
	}
}

// TestAttackMySQLFairUnavailableToCallers: the same through the service: fair Acquires with a
// short wait on held keys must answer "not acquired"; some answer unavailable instead,
// with the database healthy.
func TestAttackMySQLFairUnavailableToCallers(t *testing.T) {
	t.Parallel()
	bc := backendCase{name: "mysql", store: mysqlStore}
	a, b, _ := eventPair(t, bc)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	const keys = 24
	for k := range keys {
		must(acquireWithin(ctx, a.client, fmt.Sprintf("k%02d", k), time.Minute))(t)
	}
	run, stop := context.WithTimeout(ctx, 8*time.Second)
	defer stop()
	var nerr, nops atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for k := range keys {
		for w := range 6 {
			c := []*instance{a, b}[w%2].client
			wg.Go(func() {
				key := fmt.Sprintf("k%02d", k)
				for run.Err() == nil {
					nops.Add(1)
					res, err := acquireFair(ctx, c, key, time.Minute, 100*time.Millisecond)
					if err != nil {
						nerr.Add(1)
						first.CompareAndSwap(nil, err.Error())
					} else if res.GetAcquired() {
						t.Errorf("acquired a held key")
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d fair Acquires, %d failed", nops.Load(), nerr.Load())
	if nerr.Load() > 0 {
		t.Fatalf("%d of %d fair Acquires on held keys failed instead of answering not acquired, e.g. %v", nerr.Load(), nops.Load(), first.Load())
	}
}
