package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// Defaults of Work.
const (
	// DefaultLeaseTTL is the lease Work asks for on every task unless WithLeaseTTL says
	// otherwise; it is extended every third of it while the handler runs.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultPollWait is how long one Pick of Work waits server-side for a task when the pool
	// is empty (a long poll) unless WithPollWait says otherwise.
	DefaultPollWait = 20 * time.Second
	// MaxBackoff caps DefaultBackoff.
	MaxBackoff = 10 * time.Minute
)

// maxPickCount is the service's limit on the tasks of one Pick.
const maxPickCount = 100

// Pauses between Picks that failed on a transient error: from pickBackoffMin doubling up
// to pickBackoffMax, jittered.
const (
	pickBackoffMin = 100 * time.Millisecond
	pickBackoffMax = 5 * time.Second
)

// pickSlack is how much longer than its server-side wait a Pick may take before the client
// gives up on it (a hung connection), so that the service always answers first.
const pickSlack = 10 * time.Second

// finishTimeout bounds how long Work retries one Ack or Nack that fails on a transient
// error; the lease's end bounds it too. A task whose finish never got through comes back
// when its lease ends.
const finishTimeout = 10 * time.Second

// maxRetryAfter is the service's limit on a Nack's retry_after; longer backoffs are cut to it.
const maxRetryAfter = 30 * 24 * time.Hour

// maxReasonBytes is how much of a handler's error a Nack sends; the service keeps no more.
const maxReasonBytes = 1024

// DefaultBackoff is Work's retry delay in a pool without a retry policy: 1s·2^(attempt-1), so
// 1s, 2s, 4s, … capped at MaxBackoff. A pool's policy wins over it; WithBackoff replaces both.
func DefaultBackoff(attempt uint32) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 20 { // 2^19 s is far past the cap already; keeps the shift from overflowing
		return MaxBackoff
	}
	return min(time.Second<<(attempt-1), MaxBackoff)
}

type workOptions struct {
	concurrency int
	batch       int
	ttl         time.Duration
	order       taskpickv1.Order
	backoff     func(attempt uint32) time.Duration // nil: the pool's retry policy
	ownBackoff  bool
	backend     string
	pollWait    time.Duration
	stats       *WorkStats
}

// WorkOption configures one Work call.
type WorkOption func(*workOptions)

// WithConcurrency runs at most n handlers at once (default 1). A handler's slot is free again
// when it returns; its task's Ack or Nack runs after it, at most n of them at once, so Work
// holds at most 2n leases: n for running handlers (and the Picks that fill their slots), n
// for finishes in flight.
func WithConcurrency(n int) WorkOption { return func(o *workOptions) { o.concurrency = n } }

// WithLeaseTTL sets the lease of every picked task (1s to 12h, default DefaultLeaseTTL). Work
// extends it by the same length every third of it while the handler runs.
func WithLeaseTTL(d time.Duration) WorkOption { return func(o *workOptions) { o.ttl = d } }

// WithOrder sets which available tasks Pick takes first (default the service's, FIFO).
// ORDER_RANDOM spreads many workers over a large pool without contention.
func WithOrder(order taskpickv1.Order) WorkOption {
	return func(o *workOptions) { o.order = order }
}

// WithBatch lets one Pick lease up to n tasks (default 1; at most the concurrency and 100).
// Work never picks more tasks than it has free handler slots.
func WithBatch(n int) WorkOption { return func(o *workOptions) { o.batch = n } }

// WithBackoff sets how long a task whose handler failed waits before it may be picked again,
// from the attempt that failed (from 1), sent as the Nack's retry_after, over any pool policy.
// Without it Work sends no retry_after, so the pool's retry policy (SetPoolSettings) decides,
// and a pool without one waits DefaultBackoff (sent as default_retry_after; a service older
// than pool settings ignores that field and makes the task available again at once, so pass
// WithBackoff(DefaultBackoff) when the service may be older than this client).
func WithBackoff(f func(attempt uint32) time.Duration) WorkOption {
	return func(o *workOptions) { o.backoff, o.ownBackoff = f, true }
}

// WithTaskBackend picks the backend of the pool; empty (the default) means the service's
// default backend. The client's WithBackend applies to locks only.
func WithTaskBackend(name string) WorkOption { return func(o *workOptions) { o.backend = name } }

// WithPollWait sets how long one Pick waits server-side for a task of an empty pool
// (default DefaultPollWait); keep it under the idle timeout of any proxy on the way.
func WithPollWait(d time.Duration) WorkOption { return func(o *workOptions) { o.pollWait = d } }

// WithWorkStats makes Work count what it does in s, which the caller may read at any time.
func WithWorkStats(s *WorkStats) WorkOption { return func(o *workOptions) { o.stats = s } }

// WorkStats counts what Work did. It logs nothing: these counters are how a caller sees
// lost leases and failed finishes.
type WorkStats struct {
	// Picked counts tasks handed to the handler.
	Picked atomic.Uint64
	// Acked counts tasks whose handler succeeded and whose Ack went through.
	Acked atomic.Uint64
	// Nacked counts tasks given back: the handler failed, or Work was stopping.
	Nacked atomic.Uint64
	// Dead counts Nacks that used a task's last attempt.
	Dead atomic.Uint64
	// LeasesLost counts tasks whose lease was lost while the handler ran, or by the time of
	// their Ack or Nack: they were neither acked nor nacked, and come back (or already did)
	// to whoever picks them next.
	LeasesLost atomic.Uint64
	// FinishErrors counts Acks and Nacks that failed on transient errors until they gave up:
	// the task comes back when its lease ends.
	FinishErrors atomic.Uint64
	// PickErrors counts Picks that failed on a transient error and were retried.
	PickErrors atomic.Uint64
}

// Work runs handler on the tasks of pool until ctx ends, when it returns nil, or a Pick fails
// with an error no retry can fix (a bad request, a backend the service does not have, an
// authentication failure), which it returns.
//
// It leases tasks with Pick, never more at once than it has free handler slots (see
// WithConcurrency and WithBatch), waiting server-side for tasks when the pool is empty; a Pick
// that fails on a transient error (unavailable) is retried after a jittered backoff from
// 100ms to 5s. Each task runs in its own goroutine under a context derived from ctx, while
// the lease is extended every third of its ttl. When the service says the lease is gone
// (failed_precondition, not_found), or no extension is confirmed by the lease's deadline, the
// handler's context is canceled with a cause that wraps ErrLeaseLost
// (errors.Is(context.Cause(ctx), ErrLeaseLost)): the task may be someone else's now, so the
// handler must stop, and Work neither acks nor nacks it. The deadline is reckoned as a Lock's
// is, on this process's monotonic clock, never from the service's wall clock: when the Pick
// or the last confirmed Extend was sent, plus the span the service granted (expires_after),
// minus the safety margin (ttl/10, 50ms to 1s). The handler's context compares it with the
// clock on every call of its Done, Err and Value (and so does Task.Err), so a handler whose
// process was paused past the lease finds it lost on its first check after resuming, before
// any timer ran; an Extend answered after the deadline does not revive the lease. A deadline
// that passes after the handler returned but before Work finishes the task is a loss too.
//
// When the handler returns nil the task is acked; when it returns an error (or panics: the
// panic is recovered as an error) the task is nacked with that error as the reason, to be
// retried after the delay of the pool's retry policy for its attempt (DefaultBackoff's in a
// pool without one, WithBackoff's when given), or dead after its last attempt.
// The handler's slot is free for the next task as soon as it returns, and the Ack or Nack
// runs after it: at most concurrency of them at once (a handler that returns while that many
// are in flight keeps its slot until one is answered), so Work holds at most twice the
// concurrency in leases. Acks and Nacks made together leave together in Batch requests
// unless the client's batching is off (WithBatching).
//
// When ctx ends Work stops picking, cancels the running handlers' contexts and waits for them
// to return; tasks whose handler still failed are nacked with no retry delay, so that they
// are picked again at once by another worker, and tasks whose handler succeeded are acked.
// Work returns only after every Ack and Nack was answered or gave up (at the lease's end, or
// finishTimeout). The handler must therefore return soon after its context ends.
func (c *Client) Work(ctx context.Context, pool string, handler func(ctx context.Context, t *Task) error, opts ...WorkOption) error {
	o, err := workOpts(opts)
	if err != nil {
		return err
	}
	if handler == nil {
		return errors.New("client: work: nil handler")
	}
	w := &worker{
		c: c, pool: pool, handler: handler, o: o,
		slots: make(chan struct{}, o.concurrency), finishing: make(chan struct{}, o.concurrency),
	}
	runCtx, stop := context.WithCancelCause(ctx)
	err = w.loop(runCtx)
	stop(err) // a fatal Pick error stops the running handlers as the end of ctx would
	w.running.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func workOpts(opts []WorkOption) (workOptions, error) {
	o := workOptions{concurrency: 1, batch: 1, ttl: DefaultLeaseTTL, pollWait: DefaultPollWait}
	for _, opt := range opts {
		opt(&o)
	}
	if o.stats == nil {
		o.stats = new(WorkStats)
	}
	switch {
	case o.concurrency < 1:
		return o, fmt.Errorf("client: work: concurrency %d, want at least 1", o.concurrency)
	case o.batch < 1 || o.batch > min(o.concurrency, maxPickCount):
		return o, fmt.Errorf("client: work: batch %d, want 1 to the concurrency %d (at most %d)", o.batch, o.concurrency, maxPickCount)
	case o.ttl <= 0:
		return o, fmt.Errorf("client: work: lease ttl %v, want a positive duration", o.ttl)
	case o.pollWait < 0:
		return o, fmt.Errorf("client: work: poll wait %v must not be negative", o.pollWait)
	case o.ownBackoff && o.backoff == nil:
		return o, errors.New("client: work: nil backoff")
	}
	return o, nil
}

// worker is one Work call.
type worker struct {
	c       *Client
	pool    string
	handler func(context.Context, *Task) error
	o       workOptions
	// slots holds one token per running handler (or per task a Pick in flight may return).
	slots chan struct{}
	// finishing holds one token per Ack or Nack in flight.
	finishing chan struct{}
	running   sync.WaitGroup
}

// loop picks tasks and starts their handlers until ctx ends (nil) or a Pick fails on an
// error no retry can fix (that error), backing off after transient errors and early empty
// answers.
func (w *worker) loop(ctx context.Context) error {
	backoff := pickBackoffMin
	for {
		n, ok := w.reserve(ctx)
		if !ok {
			return nil
		}
		start := time.Now()
		got, stopped, err := w.round(ctx, n)
		if stopped {
			return nil
		}
		switch {
		case err != nil && !retryable(err):
			return fmt.Errorf("client: work %q: pick: %w", w.pool, err)
		case err != nil:
			w.o.stats.PickErrors.Add(1)
		case got == 0 && time.Since(start) < max(w.o.pollWait/2, pickBackoffMin):
			// Empty long before the wait was up: a service that does not hold Picks, or
			// WithPollWait(0); pace the polling as after an error rather than spin.
		default:
			backoff = pickBackoffMin
			continue
		}
		if !sleep(ctx, jitter(backoff)) {
			return nil
		}
		backoff = min(2*backoff, pickBackoffMax)
	}
}

// round leases up to n tasks for the n slots taken and starts their handlers (got of them),
// releasing the slots it does not use. stopped says that ctx ended, and the tasks picked
// meanwhile were given back.
func (w *worker) round(ctx context.Context, n int) (got int, stopped bool, err error) {
	start := time.Now() // also the Pick's send time: its leases are reckoned from here
	tasks, err := w.pick(ctx, n)
	p := picked{sent: start, received: time.Now()}
	if ctx.Err() != nil {
		w.giveBack(ctx, tasks, p) // picked just as ctx ended
		w.release(n)
		return 0, true, nil
	}
	if len(tasks) > n {
		// A service that answers more than asked (a bug, or not coordkit): run no more
		// than the slots taken, and give the rest back at once.
		w.giveBack(ctx, tasks[n:], p)
		tasks = tasks[:n]
	}
	w.release(n - len(tasks))
	for _, lt := range tasks {
		w.start(ctx, lt, p)
	}
	return len(tasks), false, err
}

// reserve blocks until at least one handler slot is free and takes up to a batch of the free
// ones; it reports false when ctx ended first.
func (w *worker) reserve(ctx context.Context) (int, bool) {
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	n := 1
	for n < w.o.batch {
		select {
		case w.slots <- struct{}{}:
			n++
		default:
			return n, true
		}
	}
	return n, true
}

func (w *worker) release(n int) {
	for range n {
		<-w.slots
	}
}

// pick leases up to n tasks, waiting server-side up to the poll wait for the first.
func (w *worker) pick(ctx context.Context, n int) ([]*taskpickv1.LeasedTask, error) {
	callCtx, cancel := context.WithTimeout(ctx, w.o.pollWait+pickSlack)
	defer cancel()
	res, err := w.c.tasks.Pick(callCtx, &taskpickv1.PickRequest{
		Backend: w.o.backend, Pool: w.pool, Count: uint32(n), Ttl: durationpb.New(w.o.ttl),
		Order: w.o.order, Wait: durationpb.New(w.o.pollWait),
	})
	if err != nil {
		return nil, err
	}
	return res.GetTasks(), nil
}

// picked is when a Pick was sent and answered.
type picked struct{ sent, received time.Time }

// task converts a task leased by the Pick p.
func (w *worker) task(lt *taskpickv1.LeasedTask, p picked) *Task {
	return newTask(w.o.backend, w.pool, lt, w.o.ttl, w.o.pollWait, p.sent, p.received)
}

// start runs one picked task in its own goroutine, which frees the task's slot when the
// handler returns.
func (w *worker) start(ctx context.Context, lt *taskpickv1.LeasedTask, p picked) {
	t := w.task(lt, p)
	w.o.stats.Picked.Add(1)
	w.running.Add(1)
	go func() {
		defer w.running.Done()
		w.process(ctx, t)
	}()
}

// process runs the handler under the kept lease, frees its slot, then acks or nacks the task
// unless the lease was lost, by the handler's return or by the time the finish can go out.
func (w *worker) process(ctx context.Context, t *Task) {
	keeper := keepLease(ctx, w.c, t, w.o.ttl)
	herr := w.call(t.lc.Context(), t)
	if keeper.stop() != nil {
		w.release(1)
		w.o.stats.LeasesLost.Add(1)
		return
	}
	w.finishing <- struct{}{} // the slot stays taken while the finishes in flight are at their bound
	w.release(1)
	defer func() { <-w.finishing }()
	if t.lc.overdue(time.Now()) {
		w.o.stats.LeasesLost.Add(1) // the deadline passed while the finish waited for its turn
		return
	}
	if herr == nil {
		w.ack(ctx, t)
		return
	}
	var retry, fallback *durationpb.Duration // retry unset: the pool's retry policy, else fallback
	switch {
	case ctx.Err() != nil:
		retry = durationpb.New(0) // stopping: let another worker have it at once
	case w.o.ownBackoff:
		retry = durationpb.New(min(max(w.o.backoff(t.Attempt), 0), maxRetryAfter))
	default:
		fallback = durationpb.New(DefaultBackoff(t.Attempt))
	}
	w.nack(ctx, t, retry, fallback, reason(herr))
}

// ack finishes t.
func (w *worker) ack(ctx context.Context, t *Task) {
	req := &taskpickv1.AckRequest{Backend: t.Backend, Pool: t.Pool, Id: t.ID, LeaseToken: t.LeaseToken, LeaseSecret: t.leaseSecret}
	w.finish(ctx, t, func(ctx context.Context) error {
		_, err := w.c.tasks.Ack(ctx, req)
		if err == nil {
			w.o.stats.Acked.Add(1)
		}
		return err
	})
}

// nack gives t back, to be picked again after retry (nil: as the pool's policy says, or after
// fallback in a pool without one).
func (w *worker) nack(ctx context.Context, t *Task, retry, fallback *durationpb.Duration, reason string) {
	req := &taskpickv1.NackRequest{
		Backend: t.Backend, Pool: t.Pool, Id: t.ID, LeaseToken: t.LeaseToken, LeaseSecret: t.leaseSecret,
		RetryAfter: retry, DefaultRetryAfter: fallback, Reason: reason,
	}
	w.finish(ctx, t, func(ctx context.Context) error {
		res, err := w.c.tasks.Nack(ctx, req)
		if err == nil {
			w.o.stats.Nacked.Add(1)
			if res.GetDead() {
				w.o.stats.Dead.Add(1)
			}
		}
		return err
	})
}

// giveBack nacks tasks without running them, to be picked again at once.
func (w *worker) giveBack(ctx context.Context, tasks []*taskpickv1.LeasedTask, p picked) {
	for _, lt := range tasks {
		w.o.stats.Picked.Add(1)
		t := w.task(lt, p)
		w.nack(ctx, t, durationpb.New(0), nil, "client: work stopped before the handler ran")
	}
}

// call runs the handler, turning a panic into an error.
func (w *worker) call(ctx context.Context, t *Task) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("client: handler of task %q panicked: %v", t.ID, p)
		}
	}()
	return w.handler(ctx, t)
}

// finish makes one Ack or Nack, retrying transient failures until finishTimeout or the lease's
// end. It runs even after ctx ended: the task's outcome is known and must not be lost.
func (w *worker) finish(ctx context.Context, t *Task, call func(context.Context) error) {
	deadline := t.localEnd()
	if limit := time.Now().Add(finishTimeout); limit.Before(deadline) {
		deadline = limit
	}
	fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	backoff := pickBackoffMin
	for {
		err := call(fctx)
		switch {
		case err == nil:
			return
		case gone(err):
			w.o.stats.LeasesLost.Add(1) // expired (and maybe picked again) before the finish
			return
		case !retryable(err) || fctx.Err() != nil:
			w.o.stats.FinishErrors.Add(1)
			return
		}
		if !sleep(fctx, jitter(backoff)) {
			w.o.stats.FinishErrors.Add(1)
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// reason is a handler error as a Nack sends it: valid UTF-8 (proto strings must be), cut to
// what the service keeps.
func reason(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) <= maxReasonBytes {
		return s
	}
	s = s[:maxReasonBytes]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// retryable reports whether a failed call may succeed when made again: everything but the
// answers that say the request itself is wrong or not allowed.
func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists,
		connect.CodePermissionDenied, connect.CodeFailedPrecondition, connect.CodeOutOfRange,
		connect.CodeUnimplemented, connect.CodeUnauthenticated, connect.CodeDataLoss:
		return false
	}
	return true
}

// sleep waits d, or reports false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
