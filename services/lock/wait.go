package lock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with full jitter: how waiters poll while no event
// can wake them (no NATS, or NATS down), and how they pace retries after a backend failure.
type backoff struct {
	// base is the first delay's upper bound.
	base time.Duration
	// max caps every delay.
	max time.Duration
}

// pollBackoff paces waiters while events cannot wake them.
var pollBackoff = backoff{base: 2 * time.Millisecond, max: 100 * time.Millisecond}

// wait sleeps the attempt-th delay, never past deadline, or until ctx ends (returning its
// cause).
func (b backoff) wait(ctx context.Context, attempt int, deadline time.Time) error {
	return b.waitOrWake(ctx, attempt, deadline, nil)
}

// waitOrWake is wait that also ends when wake fires (a nil wake never does).
func (b backoff) waitOrWake(ctx context.Context, attempt int, deadline time.Time, wake <-chan struct{}) error {
	ceiling := b.max
	if shift := attempt - 1; shift < 16 {
		ceiling = min(b.base<<shift, b.max)
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
	case <-wake:
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
var retryBackoff = backoff{base: 10 * time.Millisecond, max: time.Second}

// acquire tries until the lock is taken or the wait, capped by the request deadline, is over.
// A waiter joins the instance's line for the key before its first attempt, so a release
// that follows the answer "taken" is not missed (see await). While waiting, a backend
// failure (ErrUnavailable) is retried, not returned: a waiter asked to wait, and a slow
// moment of the backend, often caused by the waiters themselves, must not end a wait of an
// hour; only when the wait ends is the last failure returned. Every attempt after the first
// takes one of the backend's slots (Config.WaitAttempts).
func (s *Service) acquire(ctx context.Context, name string, b Backend, p acquireParams) (Attempt, error) {
	key, owner, ttl, wait := p.key, p.owner, p.ttl, p.wait
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
	var w *waiter
	var got Lease // what w took, for the next in line
	var queue QueueBackend
	if wait > 0 {
		w = s.waiters.join(name, key)
		defer func() { s.waiters.leave(w, got.FencingToken != 0, got.ExpiresAt) }()
		if qb, ok := b.(QueueBackend); ok && p.fair {
			queue = qb
			defer func() {
				if got.FencingToken == 0 {
					s.leaveQueue(ctx, name, queue, key, owner)
				}
			}()
		}
	}
	var (
		last     Attempt // the last answer, returned when the wait ends without a failure
		lastErr  error   // the last attempt's failure, returned when the wait ends after it
		failures int     // failures in a row, for the retry backoff
		free     int     // answers in a row that found the lock free (or raced), for their backoff
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
		att, err := s.try(ctx, name, b, queue, key, owner, ttl, attempt, until)
		switch {
		case errors.Is(err, errWaitOver):
			return done(last, lastErr, attempt)
		case err == nil && att.Acquired:
			got = att.Lease
			return done(att, nil, attempt)
		case err == nil:
			s.metrics.contention.WithLabelValues(name).Inc()
			last, lastErr, failures = att, nil, 0
			if att.Holder.Held && !att.Raced {
				free = 0
				if w != nil {
					s.trackExpiry(name, key, att.Holder) // so its expiry is announced
				}
			} else {
				free++
			}
			if att.Arrival != 0 {
				s.waiters.setArrival(w, att.Arrival)
			}
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
			err = retryBackoff.wait(ctx, failures, until)
		} else {
			err = s.await(ctx, w, last, queue != nil, attempt, free, until)
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
func (s *Service) try(ctx context.Context, name string, b Backend, queue QueueBackend, key, owner string, ttl time.Duration, attempt int, until time.Time) (Attempt, error) {
	tryAcquire := b.TryAcquire
	if queue != nil {
		tryAcquire = func(ctx context.Context, key, owner string, ttl time.Duration) (Attempt, error) {
			return queue.TryAcquireFair(ctx, key, owner, ttl, s.entryTTL)
		}
	}
	if attempt == 1 {
		return tryAcquire(ctx, key, owner, ttl)
	}
	sl := s.slots[name]
	if err := sl.take(ctx, until); err != nil {
		return Attempt{}, err
	}
	defer sl.put()
	s.metrics.waiterAttempts.WithLabelValues(name).Inc()
	inFlight := s.metrics.waitAttempts.WithLabelValues(name)
	inFlight.Inc()
	defer inFlight.Dec()
	return tryAcquire(ctx, key, owner, ttl)
}

// cleanupTimeout bounds the clean-up calls a request makes after its context may have
// ended: taking a fair waiter that gave up out of the backend's line (if it fails, the
// entry's own lease ends it) and dropping the holds of lost attempts.
const cleanupTimeout = 2 * time.Second

// cleanupContext is the context of a request's clean-up: ctx's values, not its end, and at
// most cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// leaveQueue takes a fair waiter that did not get the lock out of the backend's line at
// once, so the waiters behind it do not wait out its entry's lease. It runs even when the
// request was canceled (that is when it matters most), in the background; Close waits for
// it, and whoever opened the backend closes it only after Close (lockservice's
// Mounted.Close), so a server's shutdown, which cancels its waits, does not leave their
// entries behind.
func (s *Service) leaveQueue(ctx context.Context, name string, queue QueueBackend, key, owner string) {
	s.background.Go(func() {
		ctx, cancel := cleanupContext(ctx)
		defer cancel()
		if err := queue.LeaveQueue(ctx, key, owner); err != nil {
			s.log.DebugContext(ctx, "lock: a fair waiter could not leave the line; its entry's lease will end it",
				"backend", name, "key", key, "error", err)
		}
	})
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
		if werr := retryBackoff.wait(ctx, failures, until); werr != nil {
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
	// The answer may still reach the caller after ctx ends (a shutdown cancels requests but
	// sends their answers): the holds must go all the same, or a fresh owner would hold twice.
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	for att.Lease.HoldCount > 1 {
		remaining, _, err := b.Release(ctx, key, owner, att.Lease.FencingToken)
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

// await blocks a waiter whose last attempt found the lock held by holder until another
// attempt is worth making, until until, or until ctx ends (returning its cause).
//
// With events (NATS up) it waits for a push: the head of the line is woken by the release
// or expiry event of the lease, the others wait their turn, so a release costs one attempt
// per instance. No event is needed for a lease that runs out: every waiter arms a timer at
// the holder's expiry; the head then tries, anyone else wakes the head (once per lease).
// The head also re-checks every Config.Recheck, so an event lost on its way (NATS delivers at
// most once) delays it by that much at most. Without events every waiter polls with backoff,
// never past the holder's expiry.
//
// A fair waiter also tries every third of its entry's lease, which renews its place in the
// backend's line.
func (s *Service) await(ctx context.Context, w *waiter, last Attempt, fair bool, attempt, free int, until time.Time) error {
	holder := last.Holder
	next := until
	if h := holder.ExpiresAt; holder.Held && h.Before(next) {
		next = h
	}
	if !holder.Held || last.Raced {
		// The lock was free yet not ours: another try took it between our read and write,
		// tries split Redlock's nodes, or (fair) a waiter ahead has the turn and may give it
		// up. No release may announce the next chance, so try again after a short backoff
		// (short: it counts only these answers in a row), or at once when woken.
		return pollBackoff.waitOrWake(ctx, free, next, w.wake)
	}
	var renew <-chan time.Time
	if fair {
		t := time.NewTimer(s.entryTTL / 3)
		defer t.Stop()
		renew = t.C // polling (below) tries far more often anyway
	}
	changed := s.push.next() // before the check, so a change right after it is not missed
	if s.bus == nil || !s.bus.Connected() {
		return pollBackoff.waitOrWake(ctx, attempt, next, w.wake)
	}
	end := time.NewTimer(time.Until(until))
	defer end.Stop()
	var expiry <-chan time.Time
	var expiryTimer *time.Timer
	arm := func(at time.Time) {
		if expiryTimer != nil {
			expiryTimer.Stop()
		}
		expiryTimer = time.NewTimer(max(time.Until(at), 0))
		expiry = expiryTimer.C
	}
	defer func() {
		if expiryTimer != nil {
			expiryTimer.Stop()
		}
	}()
	if next.Before(until) {
		// A holder whose reported expiry has passed while the backend still keeps it (its
		// clock is a little behind ours) is tried again after a short pause, not in a spin.
		if soon := time.Now().Add(pollBackoff.base); next.Before(soon) {
			next = soon
		}
		arm(next)
	}
	var recheck <-chan time.Time
	if s.recheck > 0 {
		t := time.NewTicker(s.recheck)
		defer t.Stop()
		recheck = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-w.wake:
			return nil
		case <-end.C:
			return nil
		case <-renew:
			return nil
		case <-changed: // NATS went down or came back: poll, or re-check and wait anew
			return nil
		case at := <-w.hint: // w became the head behind a holder it has not seen
			if at.Before(until) {
				arm(at)
			}
		case <-expiry:
			expiry = nil
			if s.waiters.isHead(w) {
				s.metrics.wakeups.WithLabelValues(w.key.backend, "expiry").Inc()
				return nil
			}
			if s.waiters.nudgeHead(w, holder.FencingToken) {
				s.metrics.wakeups.WithLabelValues(w.key.backend, "expiry").Inc()
			}
		case <-recheck:
			if s.waiters.isHead(w) {
				s.metrics.wakeups.WithLabelValues(w.key.backend, "recheck").Inc()
				return nil
			}
		}
	}
}
