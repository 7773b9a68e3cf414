package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
)

// Tasks is the raw task-pick API, for callers that manage leases themselves (like the CLI).
// Work runs a worker pool over it.
func (c *Client) Tasks() taskpickv1connect.TaskPickServiceClient { return c.tasks }

// Task is a task that Work handed to a handler, under a lease that Work keeps extending
// while the handler runs. Its fields do not change; ExpiresAt and Deadline move with every
// extension.
type Task struct {
	// Backend is the backend the task was picked from, as Work was told (empty: the
	// service's default).
	Backend string
	// Pool is the task's pool.
	Pool string
	// ID is the task's id, unique within the pool.
	ID string
	// Payload is the payload as put.
	Payload []byte
	// Priority is the task's priority.
	Priority int32
	// Attempt is which pick of the task this is, from 1.
	Attempt uint32
	// MaxAttempts is how many picks the task gets before it is dead.
	MaxAttempts uint32
	// LeaseToken is the fencing token of this lease: it strictly increases with every pick
	// of the task. Send it with every write the task makes and have the storage reject a
	// token lower than one it has seen, so that a worker paused past its lease cannot
	// overwrite the work of the worker that holds the task now.
	LeaseToken uint64

	// leaseSecret proves the lease to Ack, Nack and Extend; Work sends it, and it is not
	// shown to handlers, so that it cannot end up in their logs.
	leaseSecret string

	// sent is when the Pick that leased the task was sent, and end the lease's end on this
	// process's clocks as its answer granted it: where lc starts.
	sent, end time.Time
	// lc vouches for the lease while Work runs the handler: nil before, and for a Task that
	// did not come from Work.
	lc *leaseClock

	mu        sync.Mutex
	expiresAt time.Time
}

// newTask converts a task leased by a Pick of ttl and server-side wait, sent at sent and
// answered at received.
func newTask(backend, pool string, lt *taskpickv1.LeasedTask, ttl, wait time.Duration, sent, received time.Time) *Task {
	return &Task{
		Backend: backend, Pool: pool, ID: lt.GetId(), Payload: lt.GetPayload(), Priority: lt.GetPriority(),
		Attempt: lt.GetAttempt(), MaxAttempts: lt.GetMaxAttempts(), LeaseToken: lt.GetLeaseToken(),
		leaseSecret: lt.GetLeaseSecret(), expiresAt: lt.GetExpiresAt().AsTime(),
		sent: sent, end: leaseEnd(lt.GetExpiresAfter(), lt.GetExpiresAt(), ttl, sent, received, wait),
	}
}

// LeaseSecret is the secret that proves the lease to Ack, Nack and Extend (Work sends it on
// its own). It is for handing the lease to another process that finishes the task; keep it
// as a password: never log it, never put it where the task's readers can see it.
func (t *Task) LeaseSecret() string { return t.leaseSecret }

// Token is the lease's fencing token, LeaseToken.
func (t *Task) Token() uint64 { return t.LeaseToken }

// LastAttempt reports whether a failure of this attempt makes the task dead.
func (t *Task) LastAttempt() bool { return t.Attempt >= t.MaxAttempts }

// ExpiresAt is when the lease ends unless extended again, as the service last reported it,
// on the service's wall clock: for display. Work goes by Deadline, which does not depend on
// the two clocks agreeing.
func (t *Task) ExpiresAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expiresAt
}

func (t *Task) setExpiresAt(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expiresAt = at
}

// Deadline is the moment, on this process's clock, after which Work no longer vouches for
// the lease unless an extension confirms it first: when the Pick or the last confirmed Extend
// was sent, plus the span the service granted, minus the safety margin (as for a Lock). It
// carries Go's monotonic clock reading: compare it with time.Now, not with times from
// elsewhere. It is zero for a Task that Work is not running.
func (t *Task) Deadline() time.Time {
	if t.lc == nil {
		return time.Time{}
	}
	return t.lc.Deadline()
}

// Err is nil while Work holds the task's lease (and for a Task that Work is not running), or
// why the lease was lost: an error wrapping ErrLeaseLost, the cause of the handler's context.
// It compares the deadline with the clock on every call, as the handler's context does on
// every call of its Done, Err and Value: a handler that checks right after its process was
// paused past the lease finds it lost before any timer ran.
func (t *Task) Err() error {
	if t.lc == nil {
		return nil
	}
	return t.lc.Err()
}

// localEnd is when the lease ends on this process's clocks: the last confirmed end.
func (t *Task) localEnd() time.Time {
	if t.lc == nil {
		return t.end
	}
	return t.lc.endTime()
}

// leaseKeeper extends a task's lease every third of its ttl while the handler runs. Its
// leaseClock ends the lease (cancels the handler's context) the moment the SDK can no longer
// vouch for it: at once when the service says the lease is gone, else when no extension was
// confirmed by the deadline, noticed by a timer or by any check. Transient failures are
// retried with jittered, doubling backoff until then, each try bounded by the deadline.
type leaseKeeper struct {
	c   *Client
	t   *Task
	ttl time.Duration
	lc  *leaseClock
	// halt ends the keeper (stop); an extension in flight is abandoned, never a loss.
	halt   context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// keepLease starts keeping t's lease of ttl, under a context derived from parent (t.lc's,
// the handler's).
func keepLease(parent context.Context, c *Client, t *Task, ttl time.Duration) *leaseKeeper {
	t.lc = newLeaseClock(parent, fmt.Sprintf("extend task %q", t.ID), safetyMargin(ttl), t.sent, t.end)
	halt, cancel := context.WithCancel(context.Background())
	k := &leaseKeeper{c: c, t: t, ttl: ttl, lc: t.lc, halt: halt, cancel: cancel, done: make(chan struct{})}
	go k.run()
	return k
}

// stop ends the keeper and the lease's context, and returns the loss, or nil while the lease
// was still held: a deadline that passed while the handler finished is a loss too.
func (k *leaseKeeper) stop() error {
	k.cancel()
	<-k.done
	k.lc.stop()
	err := k.lc.Err()
	k.lc.finish(context.Canceled)
	return err
}

func (k *leaseKeeper) run() {
	defer close(k.done)
	next := time.NewTimer(k.interval())
	defer next.Stop()
	for {
		select {
		case <-k.halt.Done():
			return
		case <-k.lc.lost:
			return
		case <-next.C:
		}
		if !k.extend() {
			return
		}
		next.Reset(k.interval())
	}
}

// interval is a third of the lease: of the ttl, or of what is left of it when that is
// shorter (a slow Pick answer), so that the retries have two thirds of it.
func (k *leaseKeeper) interval() time.Duration {
	return max(min(k.ttl, time.Until(k.lc.endTime()))/3, 10*time.Millisecond)
}

// extend runs one extension round: tries until one confirms the lease (true), the service
// says it is gone, the deadline passes, or stop (false).
func (k *leaseKeeper) extend() bool {
	req := &taskpickv1.ExtendRequest{
		Backend: k.t.Backend, Pool: k.t.Pool, Id: k.t.ID, LeaseToken: k.t.LeaseToken, LeaseSecret: k.t.leaseSecret,
		Ttl: durationpb.New(k.ttl),
	}
	backoff := firstBackoff(k.ttl)
	for {
		if k.lc.Err() != nil { // the deadline passed: the check ended the lease
			return false
		}
		deadline := k.lc.Deadline()
		ctx, cancel := context.WithDeadline(k.halt, deadline)
		sent := time.Now()
		res, err := k.c.tasks.Extend(ctx, req)
		cancel()
		switch {
		case k.halt.Err() != nil:
			return false
		case err == nil:
			now := time.Now()
			if !k.lc.confirm(now, leaseEnd(res.GetExpiresAfter(), res.GetExpiresAt(), k.ttl, sent, now, 0)) {
				return false
			}
			k.t.setExpiresAt(res.GetExpiresAt().AsTime())
			return true
		case gone(err):
			k.lc.lose(err)
			return false
		}
		k.lc.failed(err)
		wait := min(jitter(backoff), max(time.Until(deadline), 0))
		if !sleep(k.halt, wait) {
			return false
		}
		backoff = min(2*backoff, maxBackoff(k.ttl))
	}
}
