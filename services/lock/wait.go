package lock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Waker decides when a blocked Acquire tries again. The service calls Wait after every attempt
// that found the lock taken; it returns when another attempt is worth making.
//
// BackoffWaker polls; an event-driven Waker (woken by release events) plugs in here without
// touching the backends or the handler.
type Waker interface {
	// Wait blocks until the lock (backend, key) may be free, until deadline, or until ctx
	// ends (returning context.Cause(ctx)). attempt counts the failed attempts so far, from 1. deadline
	// is never later than the holder's expiry, so a missed wake-up only delays a waiter.
	Wait(ctx context.Context, backend, key string, attempt int, deadline time.Time) error
}

// BackoffWaker retries with capped exponential backoff and full jitter.
type BackoffWaker struct {
	// Base is the first delay's upper bound; default 2ms.
	Base time.Duration
	// Max caps every delay; default 100ms.
	Max time.Duration
}

// Wait implements Waker.
func (w BackoffWaker) Wait(ctx context.Context, _, _ string, attempt int, deadline time.Time) error {
	base, maxDelay := w.Base, w.Max
	if base <= 0 {
		base = 2 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 100 * time.Millisecond
	}
	ceiling := maxDelay
	if shift := attempt - 1; shift < 16 {
		ceiling = min(base<<shift, maxDelay)
	}
	delay := ceiling/2 + rand.N(ceiling/2+1)
	if untilDeadline := time.Until(deadline); untilDeadline < delay {
		delay = max(untilDeadline, 0)
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// deadlineMargin is kept free at the end of a request's deadline for the last attempt's reply.
const deadlineMargin = 50 * time.Millisecond

// DefaultWaitAttempts is Config.WaitAttempts by default: a few backend calls at a time per
// backend serve every waiter of an instance (each call takes milliseconds, a waiter tries
// again after tens of them), far below a connection pool's size (sqllock's MySQL pool has 16),
// so holders' calls always find a connection.
const DefaultWaitAttempts = 4

// retryBackoff paces a waiter's retries after the backend failed: slower than the contention
// backoff, since a backend that just failed (often because it is overloaded) needs air.
var retryBackoff = BackoffWaker{Base: 10 * time.Millisecond, Max: time.Second}

// acquire tries until the lock is taken or the wait, capped by the request deadline, is over.
// While waiting, a backend failure (ErrUnavailable) is retried, not returned: a waiter asked
// to wait, and a slow moment of the backend, often caused by the waiters themselves, must
// not end a wait of an hour; only when the wait ends is the last failure returned. Every
// attempt after the first takes one of the backend's slots (Config.WaitAttempts).
func (s *Service) acquire(ctx context.Context, name string, b Backend, key, owner string, ttl, wait time.Duration) (Attempt, error) {
	start := time.Now()
	until := start.Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Add(-deadlineMargin).Before(until) {
		until = d.Add(-deadlineMargin)
	}
	if fb, ok := b.(FairBackend); ok && wait > 0 {
		att, err := s.acquireFair(ctx, name, fb, key, owner, ttl, until)
		s.metrics.waited.WithLabelValues(name).Observe(time.Since(start).Seconds())
		if err == nil && !att.Acquired {
			s.metrics.contention.WithLabelValues(name).Inc()
		}
		return att, err
	}
	var (
		last     Attempt // the last answer, returned when the wait ends without a failure
		lastErr  error   // the last attempt's failure, returned when the wait ends after it
		failures int     // failures in a row, for the retry backoff
	)
	done := func(att Attempt, err error, attempt int) (Attempt, error) {
		if attempt > 1 {
			s.metrics.waited.WithLabelValues(name).Observe(time.Since(start).Seconds())
		}
		return att, err
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 && !time.Now().Before(until) {
			return done(last, lastErr, attempt)
		}
		att, err := s.try(ctx, name, b, key, owner, ttl, attempt, until)
		switch {
		case errors.Is(err, errWaitOver):
			return done(last, lastErr, attempt)
		case err == nil && att.Acquired:
			return done(att, nil, attempt)
		case err == nil:
			s.metrics.contention.WithLabelValues(name).Inc()
			last, lastErr, failures = att, nil, 0
		case wait > 0 && errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
			s.metrics.retries.WithLabelValues(name).Inc()
			lastErr = err
			failures++
		default: // the caller's ending, the server's shutdown, or an answer retrying cannot change
			return done(Attempt{}, err, attempt)
		}
		if !time.Now().Before(until) {
			return done(last, lastErr, attempt)
		}
		if lastErr != nil {
			err = retryBackoff.Wait(ctx, name, key, failures, until)
		} else {
			next := until
			if h := last.Holder.ExpiresAt; h.After(time.Now()) && h.Before(next) {
				next = h
			}
			err = s.waker.Wait(ctx, name, key, attempt, next)
		}
		if err != nil {
			return done(Attempt{}, err, attempt)
		}
	}
}

// errWaitOver is try's answer when the wait ended while it queued for a slot.
var errWaitOver = errors.New("lock: wait over")

// try makes one attempt; every attempt after the first waits for one of the backend's
// slots, up to until.
func (s *Service) try(ctx context.Context, name string, b Backend, key, owner string, ttl time.Duration, attempt int, until time.Time) (Attempt, error) {
	if attempt == 1 {
		return b.TryAcquire(ctx, key, owner, ttl)
	}
	sl := s.slots[name]
	if err := sl.take(ctx, until); err != nil {
		return Attempt{}, err
	}
	defer sl.put()
	inFlight := s.metrics.waitAttempts.WithLabelValues(name)
	inFlight.Inc()
	defer inFlight.Dec()
	return b.TryAcquire(ctx, key, owner, ttl)
}

// acquireFair hands the wait to a backend that queues natively, again with what is left of
// it after each failure. It takes no slot: such a backend waits on a watch, not by polling,
// so its waiters cost the backend nothing while they wait.
func (s *Service) acquireFair(ctx context.Context, name string, fb FairBackend, key, owner string, ttl time.Duration, until time.Time) (Attempt, error) {
	for failures := 1; ; failures++ {
		att, err := fb.AcquireWait(ctx, key, owner, ttl, max(time.Until(until), 0))
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil || !time.Now().Before(until) {
			return att, err
		}
		s.metrics.retries.WithLabelValues(name).Inc()
		if werr := retryBackoff.Wait(ctx, name, key, failures, until); werr != nil {
			return Attempt{}, werr
		}
		if !time.Now().Before(until) {
			return Attempt{}, err
		}
	}
}

// dropLostHolds undoes the holds of attempts whose answers were lost. Only this call knows a
// fresh owner, so it can hold the lock once; more holds mean a failed attempt had in fact
// taken the lock before the retry re-entered it, and the caller, who will release once, would
// leave the lock held until its lease ran out. If a release fails the lease is returned with
// the holds it really has.
func (s *Service) dropLostHolds(ctx context.Context, name string, b Backend, key, owner string, att Attempt) Attempt {
	extra := att.Lease.HoldCount - 1
	for att.Lease.HoldCount > 1 {
		remaining, err := b.Release(ctx, key, owner, att.Lease.FencingToken)
		if err != nil {
			s.log.WarnContext(ctx, "lock: could not drop the hold of an attempt whose answer was lost",
				"backend", name, "key", key, "holds", att.Lease.HoldCount, "error", err)
			return att
		}
		att.Lease.HoldCount = remaining
	}
	s.log.InfoContext(ctx, "lock: dropped holds of attempts whose answers were lost",
		"backend", name, "key", key, "dropped", extra)
	return att
}

// slots is a counting semaphore of backend attempts.
type slots chan struct{}

// take waits for a slot until ctx ends (returning its cause) or until passes (errWaitOver).
func (sl slots) take(ctx context.Context, until time.Time) error {
	select {
	case sl <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case sl <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return errWaitOver
	}
}

func (sl slots) put() { <-sl }
