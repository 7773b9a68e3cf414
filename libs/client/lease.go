package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// leaseClock is how the SDK vouches for a lease it holds, a Lock's or a task's under Work, on
// this process's own clocks. The deadline is the moment the acquire (or Pick) or the last
// confirmed renewal (or Extend) was sent, plus the span the service granted from when it took
// the request up (expires_after), minus the safety margin: the request was sent before the
// service started the lease, so the deadline falls before the service could hand the lease
// to anyone else, whatever the two wall clocks say.
//
// The deadline is compared with the clock on every check (Lost, Err, Context and the
// context's Done, Err and Value), not only by the expiry timer: a process paused past its
// deadline finds the lease lost on its very first check after resuming. The earlier of the
// monotonic and the wall clock ends the lease, so a suspend that stops the monotonic clock is
// caught too. A confirmation that comes after the deadline never revives the lease.
type leaseClock struct {
	margin time.Duration
	// what names the call that keeps the lease, for loss errors: `renew "key"`.
	what string
	// base is when the first request was sent, on both of this process's clocks; deadline is
	// how long after base the lease is vouched for (see overdue).
	base     time.Time
	deadline atomic.Int64
	// ended is set once the loss or the stop has fully taken effect (err set, ctx canceled,
	// lost closed): a check may then skip the clock.
	ended atomic.Bool

	ctx    context.Context // canceled by a loss or finish
	lctx   leaseContext    // ctx with a deadline check on each call
	cancel context.CancelCauseFunc
	lost   chan struct{}
	// lapsed builds the loss error of a deadline that passed, from the last failed try.
	lapsed func(last error) error

	mu  sync.Mutex
	end time.Time // the lease's end on the local clocks: deadline + margin
	// expiry fires at the deadline, and sets itself again for the later deadline when
	// confirmations have moved it meanwhile.
	expiry  *time.Timer
	lastErr error // the last failed try since the last confirmed one
	err     error
	stopped bool // nothing counts as a loss any more
}

// newLeaseClock vouches for a lease whose first request was sent at sent and that ends at end
// on the local clocks, under a context derived from parent. what names the renewing call in
// loss errors.
func newLeaseClock(parent context.Context, what string, margin time.Duration, sent, end time.Time) *leaseClock {
	ctx, cancel := context.WithCancelCause(parent)
	c := &leaseClock{margin: margin, what: what, base: sent, ctx: ctx, cancel: cancel, lost: make(chan struct{})}
	c.lctx = leaseContext{Context: ctx, c: c}
	c.mu.Lock() // the timer may fire at once; it must find itself set
	c.setEndLocked(end)
	c.expiry = time.AfterFunc(time.Until(c.deadlineLocked()), c.expire)
	c.mu.Unlock()
	return c
}

// leaseEnd is when a lease ends on this process's clocks, for a request of ttl and
// server-side wait sent at sent and answered at received (both read from time.Now, so they
// carry the monotonic clock): sent plus the service's expires_after (after). A service that
// does not report expires_after leaves expires_at (at), read against the local wall clock at
// received, capped by sent plus the wait and the ttl asked for.
func leaseEnd(after *durationpb.Duration, at *timestamppb.Timestamp, ttl time.Duration, sent, received time.Time, wait time.Duration) time.Time {
	if after != nil {
		return sent.Add(max(after.AsDuration(), 0))
	}
	end := received.Add(at.AsTime().Sub(received.Round(0)))
	if limit := sent.Add(wait + ttl); limit.Before(end) {
		end = limit
	}
	return end
}

// endTime is the lease's end on the local clocks.
func (c *leaseClock) endTime() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.end
}

// Deadline is the last moment the lease is vouched for without a confirmation.
func (c *leaseClock) Deadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadlineLocked()
}

// Lost is closed the moment the lease is lost; it checks the deadline first.
func (c *leaseClock) Lost() <-chan struct{} {
	c.check()
	return c.lost
}

// Context is canceled when the lease is lost or finished; it checks the deadline first, and
// so do its Done, Err and Value.
func (c *leaseClock) Context() context.Context {
	c.check()
	return c.lctx
}

// Err is nil while the lease is held, or why it was lost; it checks the deadline first.
func (c *leaseClock) Err() error {
	c.check()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// confirm moves the lease's end to end, for a confirmation received at now; it reports false
// when the lease was lost or stopped meanwhile, which a late answer does not undo. An answer
// that comes after the deadline passed does not revive the lease either, whether or not
// anything noticed the deadline yet: every check in between would have said lost. The end
// granted is taken even when it is earlier than the last: it is the service's word now.
func (c *leaseClock) confirm(now, end time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.err != nil {
		return false
	}
	if c.overdue(now) {
		c.lapseLocked()
		return false
	}
	c.setEndLocked(end)
	c.lastErr = nil
	return true
}

// failed remembers a failed try, for the loss error should the deadline pass.
func (c *leaseClock) failed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
}

// stop makes nothing count as a loss from here on, after a last check of the deadline (one
// that passed before stop is a loss, timer or not). It reports false when already stopped.
func (c *leaseClock) stop() bool {
	c.check()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	c.stopped = true
	c.expiry.Stop()
	return true
}

// finish cancels the context of a stopped lease with cause.
func (c *leaseClock) finish(cause error) {
	c.cancel(cause)
	c.ended.Store(true)
}

// setEndLocked records the lease's end on the local clocks and the deadline check reads.
func (c *leaseClock) setEndLocked(end time.Time) {
	c.end = end
	c.deadline.Store(int64(c.deadlineLocked().Sub(c.base)))
}

// deadlineLocked is the last moment the lease is vouched for without a confirmation.
func (c *leaseClock) deadlineLocked() time.Time { return c.end.Add(-c.margin) }

// overdue reports whether the deadline has passed at now, by the monotonic clock or by the
// wall clock, whichever says so first: the monotonic clock ignores wall-clock steps back,
// and the wall clock keeps counting while a suspended machine's monotonic clock stands still.
func (c *leaseClock) overdue(now time.Time) bool {
	d := time.Duration(c.deadline.Load())
	return now.Sub(c.base) >= d || now.Round(0).Sub(c.base.Round(0)) >= d
}

// check ends the lease when its deadline has passed: what every check does on every call,
// so that a check made before any timer ran (right after the process was paused) already
// finds the loss. It costs a clock read while the lease is held.
func (c *leaseClock) check() {
	if c.ended.Load() || !c.overdue(time.Now()) {
		return
	}
	c.expire()
}

// expire runs on the expiry timer, set for the first deadline, and from check: the lease is
// lost unless confirmations have moved the deadline since, in which case the timer waits for
// the new one.
func (c *leaseClock) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.err != nil {
		return
	}
	if !c.overdue(time.Now()) {
		c.expiry.Reset(time.Until(c.deadlineLocked()))
		return
	}
	c.lapseLocked()
}

// lapseLocked loses the lease for a deadline that passed with no renewal confirmed.
func (c *leaseClock) lapseLocked() {
	last := c.lastErr
	if last == nil {
		last = errNoAnswer
	}
	c.loseLocked(fmt.Errorf("%w: %s: not confirmed within the granted lease, minus the %v safety margin, from sending the last confirmed request: %w",
		ErrLeaseLost, c.what, c.margin, last))
}

// lose ends the lease with err, the service's word that it is gone.
func (c *leaseClock) lose(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.err != nil {
		return
	}
	c.loseLocked(fmt.Errorf("%w: %s: %w", ErrLeaseLost, c.what, err))
}

// loseLocked ends the lease on the client's side. Under mu, so that stop finds either no loss
// or all of it: err set, ctx canceled with it, lost closed. ended comes last, so a check that
// skips the clock for it finds all three done.
func (c *leaseClock) loseLocked(err error) {
	c.err = err
	c.expiry.Stop()
	c.cancel(err) // before closing lost: whoever sees lost closed must find the cause set
	close(c.lost)
	c.ended.Store(true)
}

// leaseContext is a lease's context with a deadline check before each of Done, Err and Value
// (context.Cause reads through Value), so that whichever the guarded work asks first after a
// pause already sees the loss.
type leaseContext struct {
	context.Context
	c *leaseClock
}

// Done implements context.Context.
func (x leaseContext) Done() <-chan struct{} {
	x.c.check()
	return x.Context.Done()
}

// Err implements context.Context.
func (x leaseContext) Err() error {
	x.c.check()
	return x.Context.Err()
}

// Value implements context.Context.
func (x leaseContext) Value(key any) any {
	x.c.check()
	return x.Context.Value(key)
}
