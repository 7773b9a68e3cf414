package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gate is a send function the test releases batch by batch; it records every batch.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	ctxs    []context.Context
	arrived chan struct{}
	release chan struct{}
}

func newGate() *gate {
	return &gate{arrived: make(chan struct{}, 1000), release: make(chan struct{}, 1000)}
}

func (g *gate) send(ctx context.Context, reqs []int) ([]Result[string], error) {
	g.mu.Lock()
	g.batches = append(g.batches, append([]int(nil), reqs...))
	g.ctxs = append(g.ctxs, ctx)
	g.mu.Unlock()
	g.arrived <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return answers(reqs), nil
}

// answers answers each request: "v<r>", or an error for a negative one.
func answers(reqs []int) []Result[string] {
	out := make([]Result[string], len(reqs))
	for i, r := range reqs {
		if r < 0 {
			out[i].Err = fmt.Errorf("negative %d", r)
		} else {
			out[i].Value = fmt.Sprint("v", r)
		}
	}
	return out
}

func (g *gate) snapshot() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]int(nil), g.batches...)
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAloneThenTogether: a call made while nothing is in flight leaves at once and alone;
// calls made while it is in flight queue and leave together, each with its own result.
func TestAloneThenTogether(t *testing.T) {
	g := newGate()
	c := New(g.send, Config{MaxInFlight: 1})
	type answer struct {
		v   string
		err error
	}
	answers := make([]chan answer, 6)
	call := func(i, req int) {
		answers[i] = make(chan answer, 1)
		go func() {
			v, err := c.Do(context.Background(), req)
			answers[i] <- answer{v, err}
		}()
	}
	call(0, 0)
	waitFor(t, g.arrived, "the first batch")
	for i := 1; i < 6; i++ {
		req := i
		if i == 3 {
			req = -3 // fails alone
		}
		call(i, req)
	}
	eventually(t, func() bool { return c.queued() == 5 }, "5 queued calls")
	g.release <- struct{}{}
	waitFor(t, g.arrived, "the second batch")
	g.release <- struct{}{}
	for i, ch := range answers {
		a := <-ch
		switch {
		case i == 3:
			if a.err == nil || a.v != "" {
				t.Errorf("call 3 = %q, %v; want its own error", a.v, a.err)
			}
		case a.err != nil || a.v != fmt.Sprint("v", i):
			t.Errorf("call %d = %q, %v; want v%d", i, a.v, a.err, i)
		}
	}
	batches := g.snapshot()
	if len(batches) != 2 || len(batches[0]) != 1 || len(batches[1]) != 5 {
		t.Fatalf("batches %v, want [0] then the 5 queued calls together", batches)
	}
}

// doubler is a send function that answers every request with its double after a short
// pause; it counts the operations sent and the most batches it had in flight at once, and
// refuses a batch larger than maxBatch.
type doubler struct {
	maxBatch       int
	inFlight, peak atomic.Int32
	sent           atomic.Int64
}

func (d *doubler) send(ctx context.Context, reqs []int) ([]Result[int], error) {
	n := d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	for p := d.peak.Load(); n > p && !d.peak.CompareAndSwap(p, n); p = d.peak.Load() {
	}
	if len(reqs) > d.maxBatch {
		return nil, fmt.Errorf("batch of %d", len(reqs))
	}
	d.sent.Add(int64(len(reqs)))
	time.Sleep(50 * time.Microsecond)
	out := make([]Result[int], len(reqs))
	for i, r := range reqs {
		out[i].Value = r * 2
	}
	return out, nil
}

// TestMaxBatchAndInFlight: never more batches in flight than allowed, never more
// operations in one than MaxBatch, every call answered once, under many goroutines.
func TestMaxBatchAndInFlight(t *testing.T) {
	const maxInFlight, maxBatch, calls = 3, 7, 2000
	d := &doubler{maxBatch: maxBatch}
	c := New(d.send, Config{MaxInFlight: maxInFlight, MaxBatch: maxBatch})
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Go(func() {
			v, err := c.Do(context.Background(), i)
			if err != nil || v != 2*i {
				errs <- fmt.Errorf("call %d = %d, %v", i, v, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p := d.peak.Load(); p > maxInFlight {
		t.Errorf("%d batches in flight at once, limit %d", p, maxInFlight)
	}
	if n := d.sent.Load(); n != calls {
		t.Errorf("%d operations sent for %d calls", n, calls)
	}
}

// TestCanceledWhileQueuedIsNeverSent: a call whose context ends while it waits in the queue
// returns at once and is never sent.
func TestCanceledWhileQueuedIsNeverSent(t *testing.T) {
	g := newGate()
	c := New(g.send, Config{MaxInFlight: 1})
	go c.Do(context.Background(), 1)
	waitFor(t, g.arrived, "the first batch")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Do(ctx, 2); done <- err }()
	eventually(t, func() bool { return c.queued() == 1 }, "the queued call")
	cause := errors.New("caller gave up")
	cancel(cause)
	select {
	case err := <-done:
		if !errors.Is(err, cause) {
			t.Fatalf("queued call returned %v, want its context's cause", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a canceled queued call did not return")
	}
	g.release <- struct{}{}
	eventually(t, func() bool { return c.queued() == 0 }, "an empty queue")
	time.Sleep(20 * time.Millisecond)
	if b := g.snapshot(); len(b) != 1 {
		t.Fatalf("batches %v: the canceled call was sent", b)
	}
}

// TestBatchContext: a batch carries the latest of its callers' deadlines (none when one
// caller has none), and ends once every caller has given up.
func TestBatchContext(t *testing.T) {
	g := newGate()
	c := New(g.send, Config{MaxInFlight: 1})
	go c.Do(context.Background(), 0)
	waitFor(t, g.arrived, "the first batch")

	soon, cancelSoon := context.WithTimeout(context.Background(), time.Hour)
	defer cancelSoon()
	later, cancelLater := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancelLater()
	errs := make(chan error, 2)
	go func() { _, err := c.Do(soon, 1); errs <- err }()
	go func() { _, err := c.Do(later, 2); errs <- err }()
	eventually(t, func() bool { return c.queued() == 2 }, "two queued calls")
	g.release <- struct{}{}
	waitFor(t, g.arrived, "the second batch")
	g.mu.Lock()
	ctx := g.ctxs[1]
	g.mu.Unlock()
	dl, ok := ctx.Deadline()
	want, _ := later.Deadline()
	if !ok || !dl.Equal(want) {
		t.Errorf("batch deadline %v (%v), want the latest caller's %v", dl, ok, want)
	}
	cancelSoon()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("first caller to give up got %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the batch ended while a caller still waited for it")
	}
	cancelLater()
	<-errs
	waitFor(t, ctx.Done(), "the batch's context to end once every caller gave up")
}

// TestWholeBatchFailure: an error of the batch as a whole, or an answer of the wrong length,
// fails every call of the batch.
func TestWholeBatchFailure(t *testing.T) {
	boom := errors.New("connection reset")
	for name, send := range map[string]SendFunc[int, int]{
		"error": func(context.Context, []int) ([]Result[int], error) { return nil, boom },
		"short": func(_ context.Context, reqs []int) ([]Result[int], error) {
			return make([]Result[int], len(reqs)-1), nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := New(send, Config{})
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					if _, err := c.Do(context.Background(), i); err == nil {
						t.Errorf("call %d succeeded", i)
					}
				})
			}
			wg.Wait()
		})
	}
}

func BenchmarkDoAlone(b *testing.B) {
	c := New(func(_ context.Context, reqs []int) ([]Result[int], error) {
		return make([]Result[int], len(reqs)), nil
	}, Config{})
	ctx := context.Background()
	for b.Loop() {
		_, _ = c.Do(ctx, 1)
	}
}

// TestCallersOfOneAnswerLeaveTogether: callers in a closed loop (each calls again as soon as
// its answer comes, as a lock's release follows its acquire) keep leaving together: the
// callers one answer woke make the next batch, instead of the first of them leaving alone
// and the rest waiting a round trip behind it.
func TestCallersOfOneAnswerLeaveTogether(t *testing.T) {
	const callers, rounds = 8, 40
	var mu sync.Mutex
	var sizes []int
	c := New(func(_ context.Context, reqs []int) ([]Result[int], error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		time.Sleep(200 * time.Microsecond) // the round trip
		return make([]Result[int], len(reqs)), nil
	}, Config{MaxInFlight: 1})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for range rounds {
				if _, err := c.Do(context.Background(), i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	// Every caller makes the same number of calls, so batches of all of them take
	// rounds batches; the first few, before the callers fell into step, are not counted.
	full := 0
	for _, n := range sizes {
		if n == callers {
			full++
		}
	}
	// Loose for a loaded 2-core machine (a CI run saw 29 of 40 full); the coalescer before
	// gather settled into batches of 4 and 4: 0 full in 80 batches.
	if len(sizes) > rounds*3/2 || full < rounds/2 {
		t.Fatalf("%d calls in %d batches, %d of them with all %d callers; want about %d batches, nearly all full: %v",
			callers*rounds, len(sizes), full, callers, rounds, sizes)
	}
}

// TestAnswerWinsOverLateCancel: a queued call whose context ends while its batch is
// answered gets the answer, not the context's error, when the answer is there by the time
// it looks: the operation was applied, and saying it was not would make its caller retry
// something that already happened (an acquire taken twice by one owner).
func TestAnswerWinsOverLateCancel(t *testing.T) {
	const rounds = 100
	answered := 0
	for range rounds {
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan struct{})
		c := New(func(_ context.Context, reqs []int) ([]Result[int], error) {
			if reqs[0] == 0 {
				<-first // the first call holds the only slot while the second queues
			} else {
				cancel() // the second's caller gives up just as its answer is ready
			}
			out := make([]Result[int], len(reqs))
			for i, r := range reqs {
				out[i].Value = r
			}
			return out, nil
		}, Config{MaxInFlight: 1})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = c.Do(context.Background(), 0)
		}()
		eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.inFlight == 1 && len(c.pending) == 0 }, "the first call in flight")
		got := make(chan error, 1)
		go func() {
			v, err := c.Do(ctx, 1)
			if err == nil && v != 1 {
				err = fmt.Errorf("answer %d, want 1", v)
			}
			got <- err
		}()
		eventually(t, func() bool { return c.queued() == 1 }, "the second call queued")
		close(first)
		err := <-got
		<-done
		switch {
		case err == nil:
			answered++
		case !errors.Is(err, context.Canceled):
			t.Fatalf("second call: %v", err)
		}
	}
	// The caller's goroutine is woken by the cancel and looks a moment later, after the
	// answer was handed over; only rarely does it look first.
	if answered < rounds/2 {
		t.Fatalf("%d of %d calls answered after a cancel that raced their answer, want most", answered, rounds)
	}
}

// TestDeadlinePassedInBatchIsTheCallersDeadline: callers whose deadline passes while their
// batch is in flight must get their own context's error, as a call of their own would, not
// the error the sender made of the batch's context ending: the batch's deadline runs on a
// timer of its own, which may fire before theirs.
func TestDeadlinePassedInBatchIsTheCallersDeadline(t *testing.T) {
	release := make(chan struct{})
	send := func(ctx context.Context, reqs []int) ([]Result[int], error) {
		if len(reqs) == 1 && reqs[0] == 0 { // the call that holds the slot
			<-release
			return make([]Result[int], 1), nil
		}
		<-ctx.Done()
		return nil, fmt.Errorf("backend unavailable: %v", ctx.Err()) // not wrapped, as drivers do
	}
	c := New(send, Config{MaxInFlight: 1})
	const rounds, callers = 20, 16
	var wrong atomic.Int64
	var sample atomic.Value
	inFlight := func(n int) func() bool {
		return func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.inFlight == n && len(c.pending) == 0
		}
	}
	for range rounds {
		eventually(t, inFlight(0), "an idle coalescer")
		first := make(chan struct{})
		go func() { c.Do(context.Background(), 0); close(first) }() //nolint:errcheck // holds the slot
		eventually(t, inFlight(1), "the first call in flight")
		deadline := time.Now().Add(20 * time.Millisecond)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				// Half give their deadline a cause, which they must get back.
				var cause error // nil: context.DeadlineExceeded
				want := context.DeadlineExceeded
				if i%2 == 0 {
					cause = errors.New("the caller's own cause")
					want = cause
				}
				ctx, cancel := context.WithDeadlineCause(context.Background(), deadline, cause)
				defer cancel()
				if _, err := c.Do(ctx, i+1); !errors.Is(err, want) {
					wrong.Add(1)
					sample.Store(fmt.Sprintf("%v, want %v", err, want))
				}
			})
		}
		eventually(t, func() bool { return c.queued() == callers }, "the queued callers")
		release <- struct{}{}
		<-first
		wg.Wait()
	}
	if n := wrong.Load(); n > 0 {
		t.Fatalf("%d of %d callers past their deadline got another error, e.g. %v", n, rounds*callers, sample.Load())
	}
}
