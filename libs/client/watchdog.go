package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// The safety margin is ttl/10 within these bounds, and never more than a quarter of the ttl.
// The floor covers what does not shrink with the lease: a timer firing late on a busy host,
// the guarded work noticing Lost between its check and its write. The ceiling keeps long
// leases from giving up seconds of retrying for no gain.
const (
	minMargin = 50 * time.Millisecond
	maxMargin = time.Second
)

// maxTries bounds the renewals in flight at once: enough that a try stuck on a dead
// connection does not stop the next from getting through on a fresh one, few enough not to
// pile load on a service that is merely slow.
const maxTries = 3

// errNoAnswer is the last error of a lease lost while every renewal was still unanswered.
// It carries deadline_exceeded, as a timed-out call would.
var errNoAnswer = connect.NewError(connect.CodeDeadlineExceeded, errors.New("client: no renewal answered before the lease's deadline"))

// safetyMargin is how long before the lease's end the watchdog stops vouching for a lease
// of ttl that it could not renew.
func safetyMargin(ttl time.Duration) time.Duration {
	return min(max(ttl/10, minMargin), maxMargin, ttl/4)
}

// firstBackoff and maxBackoff bound the pause between renewal tries: from ttl/20 (5ms to
// 50ms) doubling up to ttl/10 (10ms to 1s), so that several tries fit in even a short lease
// and a long outage costs about one try a second.
func firstBackoff(ttl time.Duration) time.Duration {
	return min(max(ttl/20, 5*time.Millisecond), 50*time.Millisecond)
}

func maxBackoff(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), time.Second)
}

// jitter spreads d over [d/2, d], so that many clients cut off together do not come back in
// step.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// gone reports whether a failed renewal is the service's answer that the lease is no longer
// this owner's, or a request no retry can fix: waiting for the deadline would only keep the
// guarded work running on a lock it does not hold.
func gone(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, // not held: released or expired
		connect.CodePermissionDenied, // another owner holds it
		connect.CodeInvalidArgument,
		connect.CodeNotFound,
		connect.CodeUnauthenticated:
		return true
	}
	return false
}

// renewal is the outcome of one Renew call.
type renewal struct {
	res  *lockv1.RenewResponse
	err  error
	sent time.Time // when the try was sent: the renewed lease is reckoned from it
}

// watchdog renews the lease a third of the way into it until Unlock or a loss.
func (l *Lock) watchdog() {
	defer close(l.done)
	next := time.NewTimer(l.renewInterval())
	defer next.Stop()
	for {
		select {
		case <-l.dog.Done():
			return
		case <-next.C:
		}
		if !l.renew() {
			return
		}
		next.Reset(l.renewInterval())
	}
}

// renewInterval is a third of the lease: of the ttl asked for, or of what the backend
// granted when that is shorter (a Redlock validity, a ZooKeeper lease capped by its session
// timeout), so that the retries have two thirds of the lease, less the margin.
func (l *Lock) renewInterval() time.Duration {
	return max(min(l.ttl, time.Until(l.lc.endTime()))/3, 10*time.Millisecond)
}

// renew runs one renewal round: tries, started a jittered backoff apart while none has
// confirmed the lease, until one does (true), the service says the lease is gone, the
// deadline passes (expire loses the lease and cancels the round) or Unlock stops it (false).
//
// A try is not cut short before the deadline: an answer that comes slowly but in time
// confirms the lease as well as a quick one, and cutting tries at a fixed timeout is what
// lost leases on a loaded host. A try stuck on a dead connection is why a later try may start
// while earlier ones are still out.
func (l *Lock) renew() bool {
	ctx, cancel := context.WithCancel(l.dog)
	answers := make(chan renewal, maxTries)
	inFlight := 0
	defer func() {
		cancel()
		for range inFlight { // no try outlives its round, so Release never races one after Unlock
			<-answers
		}
	}()
	backoff := firstBackoff(l.ttl)
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			if inFlight < maxTries {
				inFlight++
				go l.try(ctx, answers, inFlight > 1)
			}
			tick.Reset(jitter(backoff))
			backoff = min(2*backoff, maxBackoff(l.ttl))
		case a := <-answers:
			inFlight--
			switch {
			case a.err == nil:
				return l.confirm(a.res, a.sent)
			case gone(a.err):
				l.lc.lose(a.err)
				return false
			default:
				l.lc.failed(a.err)
			}
		}
	}
}

// try makes one Renew call. The SDK always sends its ttl, so the lease keeps the length the
// caller asked for whatever the service's default. A try made while an earlier one is still
// out goes around the client's batching (alone, on a connection of its own), so that calls
// of others that hang with every batching slot cannot hold up the renewal too.
func (l *Lock) try(ctx context.Context, out chan<- renewal, alone bool) {
	locks := l.c.locks
	if alone {
		locks = l.c.rawLocks
	}
	sent := time.Now()
	res, err := locks.Renew(ctx, &lockv1.RenewRequest{
		Key: l.Key(), Backend: l.Backend(), Owner: l.Owner(), Ttl: durationpb.New(l.ttl),
	})
	out <- renewal{res: res, err: err, sent: sent}
}

// confirm records a lease renewed by a try sent at sent, which moves the deadline; it
// reports false when the lease was lost or unlocked meanwhile, or when the answer came after
// the deadline (see leaseClock.confirm).
func (l *Lock) confirm(res *lockv1.RenewResponse, sent time.Time) bool {
	now := time.Now()
	lease := res.GetLease()
	if !l.lc.confirm(now, leaseEnd(lease.GetExpiresAfter(), lease.GetExpiresAt(), l.ttl, sent, now, 0)) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiresAt = lease.GetExpiresAt().AsTime()
	return true
}
