package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/proto/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/proto/gen/coordkit/taskpick/v1/taskpickv1connect"
)

// Tasks is the raw task-pick API, for callers that manage leases themselves (like the CLI).
// Work runs a worker pool over it.
func (c *Client) Tasks() taskpickv1connect.TaskPickServiceClient { return c.tasks }

// Task is a task that Work handed to a handler, under a lease that Work keeps extending
// while the handler runs. Its fields do not change; ExpiresAt moves with every extension.
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

	mu        sync.Mutex
	expiresAt time.Time
}

// newTask converts a picked task.
func newTask(backend, pool string, lt *taskpickv1.LeasedTask) *Task {
	return &Task{
		Backend: backend, Pool: pool, ID: lt.GetId(), Payload: lt.GetPayload(), Priority: lt.GetPriority(),
		Attempt: lt.GetAttempt(), MaxAttempts: lt.GetMaxAttempts(), LeaseToken: lt.GetLeaseToken(),
		leaseSecret: lt.GetLeaseSecret(), expiresAt: lt.GetExpiresAt().AsTime(),
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

// ExpiresAt is when the lease ends unless extended again, as the service last reported it
// (on the service's clock).
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

// leaseKeeper extends a task's lease every third of its ttl while the handler runs, and cancels
// the handler's context (lose) the moment it can no longer vouch for the lease: at once when
// the service says the lease is gone, else when no extension was confirmed by the lease's
// end less the safety margin. Transient failures are retried with jittered, doubling backoff
// until then, each try bounded by that deadline.
type leaseKeeper struct {
	c      *Client
	t      *Task
	ttl    time.Duration
	margin time.Duration
	lose   context.CancelCauseFunc
	// halt ends the keeper (stop); an extension in flight is abandoned, never a loss.
	halt   context.Context
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the loss, written before done closes
}

// keepLease starts keeping t's lease of ttl; lose cancels the handler's context.
func keepLease(c *Client, t *Task, ttl time.Duration, lose context.CancelCauseFunc) *leaseKeeper {
	halt, cancel := context.WithCancel(context.Background())
	k := &leaseKeeper{c: c, t: t, ttl: ttl, margin: safetyMargin(ttl), lose: lose, halt: halt, cancel: cancel, done: make(chan struct{})}
	go k.run()
	return k
}

// stop ends the keeper and returns the loss, or nil while the lease was still held.
func (k *leaseKeeper) stop() error {
	k.cancel()
	<-k.done
	return k.err
}

func (k *leaseKeeper) run() {
	defer close(k.done)
	next := time.NewTimer(k.interval())
	defer next.Stop()
	for {
		select {
		case <-k.halt.Done():
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
	return max(min(k.ttl, time.Until(k.t.ExpiresAt()))/3, 10*time.Millisecond)
}

// extend runs one extension round: tries until one confirms the lease (true), the service
// says it is gone, its deadline passes, or stop (false).
func (k *leaseKeeper) extend() bool {
	req := &taskpickv1.ExtendRequest{
		Backend: k.t.Backend, Pool: k.t.Pool, Id: k.t.ID, LeaseToken: k.t.LeaseToken, LeaseSecret: k.t.leaseSecret,
		Ttl: durationpb.New(k.ttl),
	}
	backoff := firstBackoff(k.ttl)
	var last error = errNoAnswer
	for {
		deadline := k.t.ExpiresAt().Add(-k.margin)
		if !time.Now().Before(deadline) {
			k.fail(fmt.Errorf("%w: extend task %q: not confirmed before its expiry %s minus the %v safety margin: %w",
				ErrLeaseLost, k.t.ID, k.t.ExpiresAt().Format(time.RFC3339Nano), k.margin, last))
			return false
		}
		ctx, cancel := context.WithDeadline(k.halt, deadline)
		res, err := k.c.tasks.Extend(ctx, req)
		cancel()
		switch {
		case k.halt.Err() != nil:
			return false
		case err == nil:
			k.t.setExpiresAt(res.GetExpiresAt().AsTime())
			return true
		case gone(err):
			k.fail(fmt.Errorf("%w: extend task %q: %w", ErrLeaseLost, k.t.ID, err))
			return false
		}
		last = err
		wait := min(jitter(backoff), max(time.Until(deadline), 0))
		if !sleep(k.halt, wait) {
			return false
		}
		backoff = min(2*backoff, maxBackoff(k.ttl))
	}
}

// fail records the loss and cancels the handler's context with it.
func (k *leaseKeeper) fail(err error) {
	k.err = err
	k.lose(err)
}
