package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
)

// TestSafetyMargin pins the documented margin: ttl/10, at least 50ms, at most 1s, never more
// than a quarter of the ttl, so that retries always keep most of the lease.
func TestSafetyMargin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ttl, want time.Duration
	}{
		{100 * time.Millisecond, 25 * time.Millisecond}, // the quarter wins over the floor
		{200 * time.Millisecond, 50 * time.Millisecond},
		{300 * time.Millisecond, 50 * time.Millisecond}, // the floor
		{600 * time.Millisecond, 60 * time.Millisecond},
		{time.Second, 100 * time.Millisecond},
		{10 * time.Second, time.Second},
		{30 * time.Second, time.Second}, // the ceiling
		{24 * time.Hour, time.Second},
	}
	for _, tt := range tests {
		if got := safetyMargin(tt.ttl); got != tt.want {
			t.Errorf("safetyMargin(%v) = %v, want %v", tt.ttl, got, tt.want)
		}
	}
}

// TestBackoffBounds checks that retries stay jittered within bounds that fit several tries in
// the shortest lease the service grants and that a long outage is not hammered.
func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{100 * time.Millisecond, time.Second, 30 * time.Second, 24 * time.Hour} {
		first, last := firstBackoff(ttl), maxBackoff(ttl)
		window := ttl - ttl/3 - safetyMargin(ttl) // from the first renewal to the deadline
		if first <= 0 || first > last || last > time.Second || 3*last > window {
			t.Errorf("ttl %v: backoff %v..%v, want 0 < first <= max <= min(1s, a third of the %v retry window)", ttl, first, last, window)
		}
		seen := map[time.Duration]bool{}
		for range 200 {
			j := jitter(last)
			if j < last/2 || j > last {
				t.Fatalf("jitter(%v) = %v, want within [%v, %v]", last, j, last/2, last)
			}
			seen[j] = true
		}
		if len(seen) < 10 {
			t.Errorf("jitter(%v) gave %d distinct values in 200 draws, want spread", last, len(seen))
		}
	}
}

// TestGone pins which answers end a lease at once: those that say it is someone else's or
// gone, and those no retry can fix. Everything else is retried until the deadline.
func TestGone(t *testing.T) {
	t.Parallel()
	final := map[connect.Code]bool{
		connect.CodeFailedPrecondition: true,
		connect.CodePermissionDenied:   true,
		connect.CodeInvalidArgument:    true,
		connect.CodeNotFound:           true,
		connect.CodeUnauthenticated:    true,
	}
	for code := connect.CodeCanceled; code <= connect.CodeUnauthenticated; code++ {
		err := fmt.Errorf("wrapped: %w", connect.NewError(code, errors.New("x")))
		if got := gone(err); got != final[code] {
			t.Errorf("gone(%v) = %v, want %v", code, got, final[code])
		}
	}
	if gone(errors.New("not a connect error")) {
		t.Error("gone(plain error) = true, want retried")
	}
	if gone(errNoAnswer) {
		t.Error("gone(errNoAnswer) = true, want retried")
	}
}

// silentLocks is a lock service that never answers a renewal (as one cut off by the network
// would) and accepts every release.
type silentLocks struct {
	lockv1connect.LockServiceClient
}

func (silentLocks) Renew(ctx context.Context, _ *lockv1.RenewRequest) (*lockv1.RenewResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (silentLocks) Release(context.Context, *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	return &lockv1.ReleaseResponse{Released: true}, nil
}

// silentLock is a lock of ttl whose acquire was sent at sent and granted span from it, held
// through silentLocks; the expiry timer is stopped when noTimer, so that only the checks of
// each call can notice the deadline.
func silentLock(t *testing.T, ttl, span time.Duration, sent time.Time, noTimer bool) *Lock {
	t.Helper()
	c := &Client{locks: silentLocks{}, rawLocks: silentLocks{}}
	lease := &lockv1.Lease{Key: "k", Owner: "o", FencingToken: 1, HoldCount: 1,
		ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)), ExpiresAfter: durationpb.New(span)}
	l := c.newLock(lease, ttl, sent, 0)
	if noTimer {
		l.lc.mu.Lock()
		l.lc.expiry.Stop()
		l.lc.mu.Unlock()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.Unlock(ctx) //nolint:errcheck // lost on purpose
	})
	return l
}

// TestFirstCheckSeesDeadline: with no timer left to notice it, a deadline that has passed is
// still the loss on the very first call of each check, as after a pause of the process.
func TestFirstCheckSeesDeadline(t *testing.T) {
	t.Parallel()
	checks := map[string]func(l *Lock) bool{
		"Lost": func(l *Lock) bool {
			select {
			case <-l.Lost():
				return true
			default:
				return false
			}
		},
		"Err":            func(l *Lock) bool { return l.Err() != nil },
		"Context().Err":  func(l *Lock) bool { return l.Context().Err() != nil },
		"Context().Done": func(l *Lock) bool { return isClosed(l.Context().Done()) },
		"context.Cause":  func(l *Lock) bool { return context.Cause(l.Context()) != nil },
	}
	const ttl, span = time.Second, 300 * time.Millisecond
	for name, check := range checks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := silentLock(t, ttl, span, time.Now(), true)
			if check(l) {
				t.Fatalf("%s says lost %v before the deadline", name, time.Until(l.Deadline()))
			}
			time.Sleep(time.Until(l.Deadline()) + 10*time.Millisecond)
			if !check(l) {
				t.Fatalf("%s says held %v after the deadline, with no timer to notice", name, time.Since(l.Deadline()))
			}
			if !isClosed(l.lc.lost) || !errors.Is(l.lc.err, ErrLeaseLost) || !errors.Is(context.Cause(l.lc.ctx), ErrLeaseLost) {
				t.Fatalf("after %s said lost: Lost closed %v, Err %v, cause %v; want all lost", name, isClosed(l.lc.lost), l.lc.err, context.Cause(l.lc.ctx))
			}
		})
	}
}

// TestLeaseContextErrDoneAgree hammers a lease's checks from many goroutines across its
// deadline, with the expiry timer racing them: Context().Err() and Done() agree at every
// moment, Lost and Err agree with them, and every check made after the deadline (by a clock
// read before the call) says lost.
func TestLeaseContextErrDoneAgree(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		l := silentLock(t, time.Second, 150*time.Millisecond+time.Duration(round)*time.Millisecond, time.Now(), round%2 == 0)
		deadline := l.Deadline()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for {
					before := time.Now()
					var lost bool
					switch g % 4 {
					case 0:
						ctx := l.Context()
						if ctx.Err() != nil {
							lost = true
							if !isClosed(ctx.Done()) {
								t.Error("Context().Err() set while Done() is open")
							}
						}
					case 1:
						ctx := l.Context()
						if isClosed(ctx.Done()) {
							lost = true
							if !errors.Is(context.Cause(ctx), ErrLeaseLost) || ctx.Err() == nil {
								t.Errorf("Done() closed while Err() = %v, cause %v", ctx.Err(), context.Cause(ctx))
							}
						}
					case 2:
						if isClosed(l.Lost()) {
							lost = true
							if l.Err() == nil || l.Context().Err() == nil {
								t.Error("Lost closed while Err or Context().Err() is nil")
							}
						}
					case 3:
						if l.Err() != nil {
							lost = true
							if !isClosed(l.Lost()) || !isClosed(l.Context().Done()) {
								t.Error("Err set while Lost or Context().Done() is open")
							}
						}
					}
					if !lost && !before.Before(deadline) {
						t.Errorf("a check %v after the deadline says held", before.Sub(deadline))
					}
					if lost || t.Failed() {
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

// TestDeadlineFromSendTime: the deadline is the send time plus the granted span minus the
// margin on the local monotonic clock, wherever the service's wall clock puts expires_at (a
// client clock 5s behind or ahead of the service's); only a service too old to send the
// span falls back to expires_at, capped by the ttl asked for.
func TestDeadlineFromSendTime(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	sent := time.Now()
	received := sent.Add(20 * time.Millisecond)
	for _, skew := range []time.Duration{-5 * time.Second, 0, 5 * time.Second} {
		lease := &lockv1.Lease{ExpiresAt: timestamppb.New(received.Add(ttl + skew)), ExpiresAfter: durationpb.New(ttl - time.Millisecond)}
		if got, want := leaseEnd(lease.GetExpiresAfter(), lease.GetExpiresAt(), ttl, sent, received, 0), sent.Add(ttl-time.Millisecond); !got.Equal(want) {
			t.Errorf("service clock %v off: end %v after send, want %v: the span, not expires_at", skew, got.Sub(sent), want.Sub(sent))
		}
		// A long-polled acquire's span covers its wait.
		lease.ExpiresAfter = durationpb.New(10*time.Second + ttl)
		if got := leaseEnd(lease.GetExpiresAfter(), lease.GetExpiresAt(), ttl, sent, received, 10*time.Second).Sub(sent); got != 10*time.Second+ttl {
			t.Errorf("waited acquire, service clock %v off: end %v after send, want %v", skew, got, 10*time.Second+ttl)
		}
	}
	old := &lockv1.Lease{ExpiresAt: timestamppb.New(received.Add(ttl + 5*time.Second))}
	if got := leaseEnd(old.GetExpiresAfter(), old.GetExpiresAt(), ttl, sent, received, 0).Sub(sent); got != ttl {
		t.Errorf("no span, expires_at 5s late: end %v after send, want capped at the ttl %v", got, ttl)
	}
	old.ExpiresAt = timestamppb.New(received.Add(time.Second))
	if got := leaseEnd(old.GetExpiresAfter(), old.GetExpiresAt(), ttl, sent, received, 0).Sub(received).Round(time.Millisecond); got != time.Second {
		t.Errorf("no span, expires_at sooner than the ttl: end %v after the answer, want 1s", got)
	}

	l := silentLock(t, ttl, ttl, sent, true)
	if got, want := l.Deadline().Sub(sent), ttl-l.SafetyMargin(); got != want {
		t.Errorf("Deadline is %v after the send, want ttl - margin = %v", got, want)
	}
}

// TestLateRenewalDoesNotRevive: a renewal confirmed after the deadline passed unnoticed
// (no timer, no check in between) is a loss, as every check in between would have said.
func TestLateRenewalDoesNotRevive(t *testing.T) {
	t.Parallel()
	l := silentLock(t, time.Second, 100*time.Millisecond, time.Now(), true)
	sent := time.Now()
	time.Sleep(time.Until(l.Deadline()) + 10*time.Millisecond)
	res := &lockv1.RenewResponse{Lease: &lockv1.Lease{ExpiresAt: timestamppb.Now(), ExpiresAfter: durationpb.New(time.Second)}}
	if l.confirm(res, sent) {
		t.Fatal("a renewal answered after the deadline revived the lease")
	}
	if !errors.Is(l.Err(), ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
