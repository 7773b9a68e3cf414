package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

var (
	// ErrNotAcquired means the lock stayed held by someone else for the whole wait.
	ErrNotAcquired = errors.New("client: lock not acquired")
	// ErrLeaseLost means the watchdog could not renew the lease: the lock may be someone
	// else's now, so the work it guarded must stop.
	ErrLeaseLost = errors.New("client: lease lost")
	// ErrUnlocked is the cause of a Lock's context after Unlock.
	ErrUnlocked = errors.New("client: unlocked")
)

// DefaultTTL is the lease length Lock asks for unless WithTTL says otherwise.
const DefaultTTL = 30 * time.Second

// longPoll is the longest server-side wait one Acquire call asks for while Lock blocks with
// no deadline; Lock then simply asks again.
const longPoll = 30 * time.Second

type lockOptions struct {
	ttl     time.Duration
	wait    time.Duration
	hasWait bool
	owner   string
	backend string
	fair    bool
}

// LockOption configures one Lock or TryLock call.
type LockOption func(*lockOptions)

// WithTTL sets the lease length (100ms to 24h); the watchdog renews at a third of it.
func WithTTL(d time.Duration) LockOption { return func(o *lockOptions) { o.ttl = d } }

// WithWait bounds how long Lock blocks for a taken lock; by default it blocks until the
// context ends.
func WithWait(d time.Duration) LockOption {
	return func(o *lockOptions) { o.wait, o.hasWait = d, true }
}

// WithOwner acquires as owner: the same owner re-enters a lock it holds. By default the
// service makes a fresh random owner. An owner is a secret (whoever presents it can release
// the lock): the service refuses owners shorter than 16 bytes; use a random one.
func WithOwner(owner string) LockOption { return func(o *lockOptions) { o.owner = owner } }

// WithFair waits in line: while the lock is taken, waiters get it first come first served
// across service instances instead of whoever retries at the right moment.
func WithFair() LockOption { return func(o *lockOptions) { o.fair = true } }

// WithLockBackend picks the backend for this lock, overriding the client's.
func WithLockBackend(name string) LockOption { return func(o *lockOptions) { o.backend = name } }

// Lock blocks until it holds key, the wait (WithWait) passes, or ctx ends. It returns
// ErrNotAcquired when the wait passed with the lock still taken.
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	o := c.lockOptions(opts)
	var waitUntil time.Time
	if o.hasWait {
		waitUntil = time.Now().Add(o.wait)
	}
	for {
		wait := longPoll
		if o.hasWait {
			wait = min(wait, max(time.Until(waitUntil), 0))
		}
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(d), 0))
		}
		l, err := c.acquire(ctx, key, o, wait)
		if !errors.Is(err, ErrNotAcquired) {
			return l, err
		}
		if o.hasWait && !time.Now().Before(waitUntil) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", err, context.Cause(ctx))
		}
	}
}

// TryLock makes one attempt and returns ErrNotAcquired at once when the lock is taken.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, c.lockOptions(opts), 0)
}

func (c *Client) lockOptions(opts []LockOption) lockOptions {
	o := lockOptions{ttl: DefaultTTL, backend: c.backend}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (c *Client) acquire(ctx context.Context, key string, o lockOptions, wait time.Duration) (*Lock, error) {
	callCtx := ctx
	if wait > 0 {
		// Leave the server room to answer "not acquired" after its wait instead of timing out.
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, wait+2*time.Second)
		defer cancel()
	}
	sent := time.Now() // before any queueing in the batcher: the lease is reckoned from here
	res, err := c.locks.Acquire(callCtx, &lockv1.AcquireRequest{
		Key:     key,
		Backend: o.backend,
		Ttl:     durationpb.New(o.ttl),
		Wait:    durationpb.New(wait),
		Owner:   o.owner,
		Fair:    o.fair,
	})
	if err != nil {
		return nil, err
	}
	if !res.GetAcquired() {
		return nil, ErrNotAcquired
	}
	return c.newLock(res.GetLease(), o.ttl, sent, wait), nil
}

// Lock is a held lease. A watchdog renews it every third of the lease until Unlock, and
// closes Lost (cancels Context, sets Err) the moment it can no longer vouch for the lease:
//
//   - at once when the service answers that the lease is gone: failed_precondition (no longer
//     held, expired), permission_denied (another owner holds it now), or invalid_argument,
//     not_found or unauthenticated, which no retry can change;
//   - otherwise, when no renewal has been confirmed by Deadline(). A failed or slow renewal is
//     not a loss by itself: the watchdog tries again with jittered, doubling backoff, keeping
//     a few tries in flight so that one hung connection cannot stall it, until a try confirms
//     the lease or the deadline passes.
//
// The deadline is reckoned on this process's own clock, as Chubby and etcd clients reckon
// theirs: the moment the acquire or the last confirmed renewal was sent, plus the span the
// service granted from when it took the request up (the lease's expires_after), minus the
// safety margin. The request was sent before the service started the lease, so the
// deadline falls before the service could hand the lock to anyone else, whatever the two
// wall clocks say: no clock agreement is needed. The margin (ttl/10, at least 50ms and at
// most 1s, never more than a quarter of the ttl) leaves room for the guarded work to notice
// and stop, and for timers that fire late on a busy host. Against a service too old to
// report expires_after the deadline falls back to its expires_at, read on the local clock,
// which holds only while the local clock is not behind the service's by more than the margin.
//
// The deadline is compared with the clock on every call of Lost, Err and Context (and of the
// returned context's Done, Err and Value), not only by a timer: a process that was paused
// past its deadline (SIGSTOP, a long GC pause, a suspended VM) finds the lease lost on its
// very first check after resuming, before any timer had a chance to run. The clock is the
// monotonic one, and the wall clock as well: the earlier of the two ends the lease, so a
// suspend that stops the monotonic clock is caught too (a forward step of the local wall
// clock can only end a lease early, never late). Contexts derived from Context (WithCancel,
// WithTimeout) are canceled by the timer and the checks of the Lock's own methods; check
// Lost, Err or Context itself right before a write that relies on the lock.
type Lock struct {
	c     *Client
	lease *lockv1.Lease
	ttl   time.Duration
	// lc vouches for the lease on this process's clocks: deadline, checks, loss.
	lc *leaseClock
	// dog ends the watchdog: canceled by Unlock, and with the lease's context by a loss.
	dog     context.Context
	stopDog context.CancelFunc
	done    chan struct{}

	mu        sync.Mutex
	expiresAt time.Time // the service's last report, for ExpiresAt
}

func (c *Client) newLock(lease *lockv1.Lease, ttl time.Duration, sent time.Time, wait time.Duration) *Lock {
	end := leaseEnd(lease.GetExpiresAfter(), lease.GetExpiresAt(), ttl, sent, time.Now(), wait)
	lc := newLeaseClock(context.Background(), fmt.Sprintf("renew %q", lease.GetKey()), safetyMargin(ttl), sent, end)
	dog, stopDog := context.WithCancel(lc.ctx)
	l := &Lock{
		c: c, lease: lease, ttl: ttl, lc: lc,
		dog: dog, stopDog: stopDog, done: make(chan struct{}),
		expiresAt: lease.GetExpiresAt().AsTime(),
	}
	go l.watchdog()
	return l
}

// Key is the lock's key.
func (l *Lock) Key() string { return l.lease.GetKey() }

// Backend is the backend that holds the lock.
func (l *Lock) Backend() string { return l.lease.GetBackend() }

// Owner is the owner secret; pass it to WithOwner to re-enter.
func (l *Lock) Owner() string { return l.lease.GetOwner() }

// FencingToken strictly increases with every new holder of the lock: send it with each write
// the lock guards, and have the storage reject a token lower than one it has seen.
func (l *Lock) FencingToken() uint64 { return l.lease.GetFencingToken() }

// HoldCount is the owner's hold count right after this acquisition.
func (l *Lock) HoldCount() uint32 { return l.lease.GetHoldCount() }

// ExpiresAt is when the lease ends unless the watchdog renews it again, as the service last
// reported it, on the service's wall clock: for display. The watchdog goes by Deadline,
// which does not depend on the two clocks agreeing. After a loss it is the last expiry
// confirmed.
func (l *Lock) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// SafetyMargin is how long before the lease's end the watchdog gives up on a lease it cannot
// confirm: ttl/10, at least 50ms and at most 1s, and never more than a quarter of the ttl.
func (l *Lock) SafetyMargin() time.Duration { return l.lc.margin }

// Deadline is the moment, on this process's clock, after which the watchdog no longer
// vouches for the lease unless a renewal confirms it first: when the acquire or the last
// confirmed renewal was sent, plus the span the service granted, minus SafetyMargin. It
// moves with every confirmed renewal. The value carries Go's monotonic clock reading: compare
// it with time.Now, not with times from elsewhere.
func (l *Lock) Deadline() time.Time { return l.lc.Deadline() }

// Lost is closed the moment the lease is lost: the service said it is gone, or no renewal was
// confirmed by Deadline(). Each call compares the deadline with the clock first, so a
// non-blocking receive on it is a check that holds even right after the process was paused.
func (l *Lock) Lost() <-chan struct{} { return l.lc.Lost() }

// Context is canceled when the lease is lost or the lock is unlocked; context.Cause tells
// which. Run the guarded work under it. Its Done, Err and Value compare the lease's deadline
// with the clock on every call, so Err and Done agree and both say lost the moment the
// deadline has passed, even when no timer has run yet.
func (l *Lock) Context() context.Context { return l.lc.Context() }

// Err is nil while the lease is held, or why it was lost. It compares the deadline with the
// clock on every call.
func (l *Lock) Err() error { return l.lc.Err() }

// Unlock stops the watchdog and releases one hold. A renewal in flight is abandoned and never
// counts as a loss, whatever it answers. When the lease was already lost Unlock still
// tries the release (a renewal that failed on the network may have left the lease in place,
// and releasing frees it for others sooner) and returns the loss error. Calling it again is a
// no-op returning nil.
func (l *Lock) Unlock(ctx context.Context) error {
	// A deadline that passed before Unlock is a loss, timer or not; from here on nothing
	// counts as a loss, not even a racing renewal.
	if !l.lc.stop() {
		return nil
	}
	l.stopDog()
	<-l.done
	lost := l.lc.Err()
	l.lc.finish(ErrUnlocked)
	_, err := l.c.locks.Release(ctx, &lockv1.ReleaseRequest{Key: l.Key(), Backend: l.Backend(), Owner: l.Owner(), FencingToken: l.FencingToken()})
	if lost != nil {
		return lost
	}
	if err != nil {
		return fmt.Errorf("client: release %q: %w", l.Key(), err)
	}
	return nil
}
