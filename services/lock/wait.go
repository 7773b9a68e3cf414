package lock

import (
	"context"
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
