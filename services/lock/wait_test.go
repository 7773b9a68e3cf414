package lock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/services/lock"
)

// TestWaitSurvivesBackendOutage: a waiter's backend goes away for a moment in the middle of
// a long wait. The wait must go on (retrying) and end with the lock once the backend is back
// and the holder releases, not with unavailable at the first failed attempt; meanwhile the
// lock stays the holder's.
func TestWaitSurvivesBackendOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range cutCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			proxied, direct, proxies := tc.open(t)
			waiterSide := serveLock(t, lock.Config{Backends: map[string]lock.Backend{tc.name: proxied}})
			holderSide := startInstance(t, tc.name, direct)

			must(acquire(ctx, holderSide.client, "gate", "holder-secret-0123456789", time.Minute, 0))(t)
			type result struct {
				res *lockv1.AcquireResponse
				err error
			}
			got := make(chan result, 1)
			go func() {
				res, err := acquire(ctx, waiterSide.client, "gate", "", 30*time.Second, 45*time.Second)
				got <- result{res, err}
			}()
			ended := func(when string) {
				t.Helper()
				select {
				case r := <-got:
					t.Fatalf("the wait ended %s: (%v, %v); want it to go on until the lock is released", when, r.res, r.err)
				default:
				}
			}
			time.Sleep(300 * time.Millisecond) // let the waiter find the lock taken
			ended("before the outage")
			holderID := inspect(t, holderSide.client, "gate").GetHolderId()

			for _, p := range proxies {
				p.Cut()
			}
			retries := fmt.Sprintf("coordkit_lock_wait_retries_total{backend=%q}", tc.name)
			for deadline := time.Now().Add(20 * time.Second); metricValue(t, waiterSide.url, retries) < 2; {
				ended("during the outage")
				if time.Now().After(deadline) {
					t.Fatal("the waiter never met the outage: no retried failure within 20s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			ended("during the outage")
			for _, p := range proxies {
				p.Restore()
			}

			if st := inspect(t, holderSide.client, "gate"); !st.GetHeld() || st.GetHolderId() != holderID || holderID == "" {
				t.Fatalf("after the outage the lock is %v, want still the holder's", st)
			}
			must(holderSide.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "gate", Owner: "holder-secret-0123456789"}))(t)
			select {
			case r := <-got:
				if r.err != nil || !r.res.GetAcquired() {
					t.Fatalf("waiter after the outage and the release: (%v, %v), want acquired", r.res, r.err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("waiter did not get the released lock within 30s of the release")
			}
		})
	}
}

// TestWaitEndsWithLastFailure: a waiter whose backend stays away gets unavailable when its
// wait ends, not earlier and not a busy answer that hides the outage.
func TestWaitEndsWithLastFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxied, direct, proxies := cutCases[0].open(t) // redis
	waiterSide := serveLock(t, lock.Config{Backends: map[string]lock.Backend{"redis": proxied}})
	holderSide := startInstance(t, "redis", direct)
	must(acquire(ctx, holderSide.client, "gate", "holder-secret-0123456789", time.Minute, 0))(t)
	proxies[0].Cut()
	const wait = 1500 * time.Millisecond
	start := time.Now()
	_, err := acquire(ctx, waiterSide.client, "gate", "", time.Minute, wait)
	if took := time.Since(start); took < wait {
		t.Fatalf("wait of %v ended after %v with %v; want it to retry until the wait ends", wait, took, err)
	}
	wantCode(t, err, connect.CodeUnavailable)
}

// attemptGauge wraps a real backend and measures how many attempts of waiters (every
// TryAcquire of an owner on a key after that owner's first on it) run at once.
type attemptGauge struct {
	lock.Backend
	mu       sync.Mutex
	seen     map[string]bool
	waiting  atomic.Int64 // waiters' attempts in flight
	peak     atomic.Int64 // most waiters' attempts ever in flight at once
	retrying atomic.Int64 // waiters' attempts made
}

func (g *attemptGauge) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Attempt, error) {
	g.mu.Lock()
	again := g.seen[key+"\x00"+owner]
	g.seen[key+"\x00"+owner] = true
	g.mu.Unlock()
	if again {
		g.retrying.Add(1)
		n := g.waiting.Add(1)
		defer g.waiting.Add(-1)
		for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
		}
	}
	return g.Backend.TryAcquire(ctx, key, owner, ttl)
}

// TestWaitersBounded: hundreds of waiters on one MySQL key may keep only WaitAttempts
// backend attempts in flight at once, so that a holder's Release and everyone's Inspect on
// other keys find the backend free; first attempts do not queue behind them.
func TestWaitersBounded(t *testing.T) {
	t.Parallel()
	const (
		maxAttempts = 3
		waiters     = 300
	)
	ctx := context.Background()
	g := &attemptGauge{Backend: mysqlStore(t)(t), seen: map[string]bool{}}
	inst := serveLock(t, lock.Config{Backends: map[string]lock.Backend{"mysql": g}, WaitAttempts: maxAttempts})
	must(acquire(ctx, inst.client, "hot", "holder-secret-0123456789", time.Minute, 0))(t)

	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for i := range waiters {
		wg.Go(func() {
			res, err := acquire(ctx, inst.client, "hot", fmt.Sprintf("waiter-secret-%04d", i), time.Minute, 3*time.Second)
			switch {
			case err != nil:
				errs <- err
			case res.GetAcquired():
				errs <- fmt.Errorf("waiter-%d acquired a lock that was never released", i)
			}
		})
	}
	// Another caller keeps using other keys meanwhile; its calls never wait for a slot.
	var worst time.Duration
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("cold-%d", i)
		start := time.Now()
		must(acquire(ctx, inst.client, key, "other-secret-0123456789", time.Minute, 0))(t)
		inspect(t, inst.client, key)
		must(inst.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: "other-secret-0123456789"}))(t)
		worst = max(worst, time.Since(start))
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("waiter: %v", err)
	}
	t.Logf("waiters' attempts: %d, at most %d at once; another caller's slowest acquire+inspect+release: %v",
		g.retrying.Load(), g.peak.Load(), worst)
	if peak := g.peak.Load(); peak > maxAttempts {
		t.Fatalf("%d waiters' attempts ran at once, want at most WaitAttempts=%d", peak, maxAttempts)
	}
	// Uncapped, these waiters keep hundreds of attempts in flight; a few dozen attempts in
	// all would show the cap was never put to the test.
	if n := g.retrying.Load(); n < 50 {
		t.Fatalf("only %d attempts after the first by %d waiters in 3s: the test did not load the backend", n, waiters)
	}
}

// answerLoser wraps a real backend and loses the answer of the first TryAcquire after it is
// armed: the attempt takes effect on the backend, the caller sees unavailable, as when a
// connection breaks between the backend's commit and its reply.
type answerLoser struct {
	lock.Backend
	armed atomic.Bool
	// reentered, when set, runs after an attempt that re-entered a lock, before it answers.
	reentered func(ctx context.Context)
}

func (l *answerLoser) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Attempt, error) {
	att, err := l.Backend.TryAcquire(ctx, key, owner, ttl)
	if err == nil && l.armed.CompareAndSwap(true, false) {
		return lock.Attempt{}, lock.Unavailable(ctx, "test", fmt.Errorf("reply lost after the attempt took effect (acquired=%v)", att.Acquired))
	}
	if err == nil && att.Lease.HoldCount > 1 && l.reentered != nil {
		l.reentered(ctx)
	}
	return att, err
}

// TestWaitRetryAfterLostAnswer: a waiter's attempt takes the lock but its answer is lost;
// the retry re-enters the lock the service's fresh owner now holds. The caller, who never
// saw the first hold, must get a lease with one hold, which one Release frees.
func TestWaitRetryAfterLostAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &answerLoser{Backend: sqliteStore(t)(t)}
	inst := serveLock(t, lock.Config{Backends: map[string]lock.Backend{"sqlite": b}})
	b.armed.Store(true)
	res := must(acquire(ctx, inst.client, "k", "", time.Minute, 10*time.Second))(t)
	if b.armed.Load() {
		t.Fatal("the fault was never injected")
	}
	if !res.GetAcquired() || res.GetLease().GetHoldCount() != 1 {
		t.Fatalf("acquire after a lost answer = %v, want acquired with hold count 1", res)
	}
	rel := must(inst.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "k", Owner: res.GetLease().GetOwner()}))(t)
	if rel.GetHoldCount() != 0 {
		t.Fatalf("release left %d holds, want the lock free", rel.GetHoldCount())
	}
	if st := inspect(t, inst.client, "k"); st.GetHeld() {
		t.Fatalf("lock still held after its only release: %v", st)
	}
}

// TestLostHoldsDroppedDuringShutdown: as TestWaitRetryAfterLostAnswer, but the server starts
// shutting down, which cancels the request, just as the retry has re-entered the lock. The
// answer still reaches the caller (a shutdown sends the answers of the calls it drains), so
// the lost attempt's hold must be dropped all the same: the caller gets one hold, which one
// Release frees, and the store holds no more.
func TestLostHoldsDroppedDuringShutdown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := sqliteStore(t)(t)
	retried := make(chan struct{})
	b := &answerLoser{Backend: store, reentered: func(ctx context.Context) {
		close(retried)
		<-ctx.Done() // the shutdown
	}}
	inst := serveLock(t, lock.Config{Backends: map[string]lock.Backend{"sqlite": b}})
	b.armed.Store(true)
	type answer struct {
		res *lockv1.AcquireResponse
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := acquire(ctx, inst.client, "k", "", time.Minute, 10*time.Second)
		got <- answer{res, err}
	}()
	select {
	case <-retried:
	case <-time.After(10 * time.Second):
		t.Fatal("the retry never re-entered the lock")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- inst.stop() }()
	a := <-got
	if a.err != nil {
		t.Fatalf("acquire = %v; want the lease: the attempt took the lock before the shutdown", a.err)
	}
	if !a.res.GetAcquired() || a.res.GetLease().GetHoldCount() != 1 {
		t.Fatalf("acquire = %v, want acquired with hold count 1", a.res)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	st, err := store.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if st.HoldCount != 1 {
		t.Fatalf("the store holds the lock %d times, want once (the caller's)", st.HoldCount)
	}
}
