// Package batch coalesces concurrent calls into batches: natural batching, the way Redisson
// and go-redis's autopipeline pay one round trip for many operations. A call that finds a
// free sending slot goes out at once, alone, so an idle caller waits for nothing; calls that
// arrive while every slot is busy queue and leave together as the next batch the moment a
// slot frees. No timer, no linger: the batch size follows the load.
package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
)

// ErrShortAnswer means a batch's send function answered fewer or more results than it was
// given operations: every operation of that batch fails with it.
var ErrShortAnswer = errors.New("batch: answer does not match the operations sent")

// Result is one operation's outcome.
type Result[Res any] struct {
	// Value is the operation's answer when Err is nil.
	Value Res
	// Err is the operation's own error.
	Err error
}

// SendFunc sends reqs as one batch and answers each in order. A non-nil error fails every
// operation of the batch with it (the batch did not reach its destination, or its answer did
// not come back); otherwise it returns exactly len(reqs) results. For a batch of several
// calls, ctx carries none of their contexts' values (one caller's values, such as per-call
// headers, must not travel with another's operation), ends when every caller of the batch
// has given up, and has the latest of their deadlines (none when any of them has none); a
// call sent alone is sent with its caller's own context.
type SendFunc[Req, Res any] func(ctx context.Context, reqs []Req) ([]Result[Res], error)

// Config tunes a Coalescer.
type Config struct {
	// MaxInFlight is how many batches may be in flight at once; default 1. A call waits
	// only when all of them are.
	MaxInFlight int
	// MaxBatch caps the operations in one batch; default 256.
	MaxBatch int
}

// Coalescer sends operations through a SendFunc, batching those that arrive while earlier
// batches are in flight. It is safe for concurrent use.
type Coalescer[Req, Res any] struct {
	send        SendFunc[Req, Res]
	maxInFlight int
	maxBatch    int

	mu       sync.Mutex
	pending  []*call[Req, Res]
	inFlight int
}

// call is one Do waiting for its result.
type call[Req, Res any] struct {
	ctx    context.Context
	req    Req
	done   chan struct{}
	res    Result[Res]
	late   bool    // the batch's context had ended when its answer came back
	flight *flight // set, under Coalescer.mu, when the call leaves in a batch
}

// flight is one batch in flight: its context ends when the last of its callers gives up.
type flight struct {
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	waiting int
}

// New returns a Coalescer that sends through send.
func New[Req, Res any](send SendFunc[Req, Res], cfg Config) *Coalescer[Req, Res] {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 256
	}
	return &Coalescer[Req, Res]{send: send, maxInFlight: cfg.MaxInFlight, maxBatch: cfg.MaxBatch}
}

// Do sends req, alone when a sending slot is free and no other call is made at the same
// moment (then on the caller's goroutine, with ctx itself, exactly as a single call), and
// otherwise with the operations queued behind the batches in flight; it returns req's own
// result. When ctx ends first, Do returns its cause at once: an operation still queued is
// never sent, and one already sent may have been applied, exactly like a single call whose
// answer was lost.
func (c *Coalescer[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	var zero Res
	if ctx.Err() != nil {
		return zero, context.Cause(ctx)
	}
	cl := &call[Req, Res]{ctx: ctx, req: req, done: make(chan struct{})}
	c.mu.Lock()
	c.pending = append(c.pending, cl)
	if c.inFlight >= c.maxInFlight {
		c.mu.Unlock()
		return c.wait(ctx, cl)
	}
	c.inFlight++
	c.mu.Unlock()
	c.gather()
	c.mu.Lock()
	if len(c.pending) == 1 && c.pending[0] == cl {
		// Alone: sent on the caller's own goroutine with the caller's own context, as a
		// single call would be.
		c.pending = c.pending[:0]
		c.mu.Unlock()
		// Deferred: a send that panics, recovered above (net/http recovers a handler's
		// panic), must not keep the slot, or every later call would queue for good.
		defer c.releaseSlot()
		return c.sendOne(ctx, req)
	}
	c.mu.Unlock()
	go c.run()
	return c.wait(ctx, cl)
}

// sendOne sends one operation as a batch of its own and returns its result.
func (c *Coalescer[Req, Res]) sendOne(ctx context.Context, req Req) (Res, error) {
	r := c.sendAll(ctx, []Req{req})[0]
	return r.Value, r.Err
}

// sendAll sends reqs as one batch on the caller's goroutine and returns their results.
func (c *Coalescer[Req, Res]) sendAll(ctx context.Context, reqs []Req) []Result[Res] {
	results, err := c.send(ctx, reqs)
	if err == nil && len(results) != len(reqs) {
		err = fmt.Errorf("%w: %d operations, %d results", ErrShortAnswer, len(reqs), len(results))
	}
	if err != nil {
		results = make([]Result[Res], len(reqs))
		for i := range results {
			results[i].Err = err
		}
	}
	return results
}

// releaseSlot gives back a sending slot, or hands it to a new run when calls queued
// meanwhile.
func (c *Coalescer[Req, Res]) releaseSlot() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		c.inFlight--
		return
	}
	go c.run()
}

// wait waits for cl's result or for its context to end: a call still queued then leaves
// the queue and is never sent; one already sent is left to its batch.
func (c *Coalescer[Req, Res]) wait(ctx context.Context, cl *call[Req, Res]) (Res, error) {
	var zero Res
	select {
	case <-cl.done:
		return answer(ctx, cl)
	case <-ctx.Done():
	}
	c.mu.Lock()
	sent := cl.flight
	if sent == nil { // still queued: never sent
		if i := slices.Index(c.pending, cl); i >= 0 {
			c.pending = slices.Delete(c.pending, i, i+1)
		}
		c.mu.Unlock()
		return zero, context.Cause(ctx)
	}
	c.mu.Unlock()
	select {
	case <-cl.done: // answered as the context ended: the answer wins
		return answer(ctx, cl)
	default:
	}
	sent.leave()
	return zero, context.Cause(ctx)
}

// answer is a batched call's result for its caller, whose context is ctx. A failure that
// came back after the batch's context ended, once the caller's own deadline has passed, is
// that deadline's: the batch went out with the latest of its callers' deadlines on a timer
// of its own, which may fire, and fail the batch with the sender's error for it
// ("unavailable: context deadline exceeded"), before the caller's context is marked done;
// the caller must see what a call of its own would have seen (see Ending).
func answer[Req, Res any](ctx context.Context, cl *call[Req, Res]) (Res, error) {
	err := cl.res.Err
	if err == nil || !cl.late || errors.Is(err, ErrShortAnswer) || errors.Is(err, ErrSendPanicked) {
		return cl.res.Value, err // a broken answer stays an internal fault, however late
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		var zero Res
		return zero, Ending(ctx)
	}
	return cl.res.Value, err
}

// takeLocked takes the next batch off the queue and marks it sent; c.mu is held and the
// queue is not empty.
func (c *Coalescer[Req, Res]) takeLocked() ([]*call[Req, Res], *flight) {
	n := min(len(c.pending), c.maxBatch)
	batch := slices.Clone(c.pending[:n])
	c.pending = slices.Delete(c.pending, 0, n)
	f := newFlight(batch)
	return batch, f
}

// run holds a sending slot: it sends whatever is queued, batch after batch, until the
// queue is empty and the slot is given back. Before each batch it gathers the calls being
// made at that moment, so they leave together instead of the first alone: at the start,
// and after each answer, whose callers it has just woken and who often call again at once
// (a lock's release after its acquire).
func (c *Coalescer[Req, Res]) run() {
	c.gather()
	for {
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.inFlight--
			c.mu.Unlock()
			return
		}
		batch, f := c.takeLocked()
		c.mu.Unlock()
		c.sendBatch(batch, f)
		c.gather()
	}
}

// maxGatherYields bounds how often gather yields: each yield that finds more calls queued
// earns another, up to this many.
const maxGatherYields = 4

// gather lets every goroutine that is ready to run go first, so calls made at this moment
// (the operations of one request, the callers one answer woke) queue and leave together with
// the batch about to go; it yields again while that brings more. On an idle process it
// returns at once: no timer, nothing waits for calls that are not already on their way.
func (c *Coalescer[Req, Res]) gather() {
	n := c.queued()
	for range maxGatherYields {
		runtime.Gosched()
		m := c.queued()
		if m == n {
			return
		}
		n = m
	}
}

// queued is how many calls wait for a batch.
func (c *Coalescer[Req, Res]) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// ErrSendPanicked is the error of every operation of a batch whose send function panicked.
var ErrSendPanicked = errors.New("batch: the send function panicked")

// sendBatch sends one batch and hands every call its result. A panic in send fails every
// call of the batch with ErrSendPanicked: it runs on the Coalescer's own goroutine, where
// nothing above could recover it but the process would die.
func (c *Coalescer[Req, Res]) sendBatch(batch []*call[Req, Res], f *flight) {
	defer f.cancel()
	reqs := make([]Req, len(batch))
	for i, cl := range batch {
		reqs[i] = cl.req
	}
	results, err := c.sendRecovered(f.ctx, reqs)
	late := f.ctx.Err() != nil
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("%w: %d operations, %d results", ErrShortAnswer, len(batch), len(results))
	}
	for i, cl := range batch {
		if err != nil {
			cl.res = Result[Res]{Err: err}
		} else {
			cl.res = results[i]
		}
		cl.late = late
		close(cl.done)
	}
}

// newFlight marks batch as sent (c.mu is held) with the context it goes out with: no
// caller's values, the latest of the callers' deadlines, canceled once all have given up.
func newFlight[Req, Res any](batch []*call[Req, Res]) *flight {
	var latest time.Time
	bounded := true
	for _, cl := range batch {
		d, ok := cl.ctx.Deadline()
		if !ok {
			bounded = false
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	f := &flight{waiting: len(batch)}
	base := context.Background()
	if bounded {
		f.ctx, f.cancel = context.WithDeadline(base, latest)
	} else {
		f.ctx, f.cancel = context.WithCancel(base)
	}
	for _, cl := range batch {
		cl.flight = f
	}
	return f
}

// leave records that one caller gave up; the last one to leave cancels the batch.
func (f *flight) leave() {
	f.mu.Lock()
	f.waiting--
	last := f.waiting == 0
	f.mu.Unlock()
	if last {
		f.cancel()
	}
}

// sendRecovered is send with a panic turned into ErrSendPanicked.
func (c *Coalescer[Req, Res]) sendRecovered(ctx context.Context, reqs []Req) (results []Result[Res], err error) {
	defer func() {
		if p := recover(); p != nil {
			results, err = nil, fmt.Errorf("%w: %v", ErrSendPanicked, p)
		}
	}()
	return c.send(ctx, reqs)
}
