package batch

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPanicInLoneSendFreesSlot: a call sent alone runs send on its caller's goroutine. When
// send panics there and the caller's stack recovers (net/http recovers every handler's
// panic, so one bad request does not kill the server), the slot it held must be given back:
// otherwise every later call queues behind a sender that no longer exists and waits until
// its context ends, for the life of the process.
func TestPanicInLoneSendFreesSlot(t *testing.T) {
	c := New(func(_ context.Context, reqs []int) ([]Result[int], error) {
		if reqs[0] == 0 {
			panic("send failed badly")
		}
		out := make([]Result[int], len(reqs))
		for i, r := range reqs {
			out[i].Value = r
		}
		return out, nil
	}, Config{MaxInFlight: 1})
	func() {
		defer func() { _ = recover() }()
		_, _ = c.Do(context.Background(), 0)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := c.Do(ctx, 1)
	if errors.Is(err, context.DeadlineExceeded) {
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("a call after a recovered panic in a lone send waited 2s and gave up (inFlight %d of 1, %d queued): the slot was never given back", c.inFlight, len(c.pending))
	}
	if err != nil || v != 1 {
		t.Fatalf("Do = %d, %v; want 1, nil", v, err)
	}
}

// TestPanicInBatchSendFailsItsCalls: a send that panics for a batch of several calls (on
// the Coalescer's own goroutine, where nothing above could recover it) fails exactly that
// batch's calls with ErrSendPanicked; the process lives on and later calls are sent.
func TestPanicInBatchSendFailsItsCalls(t *testing.T) {
	g := newGate()
	c := New(func(ctx context.Context, reqs []int) ([]Result[string], error) {
		if len(reqs) > 1 {
			panic("send failed badly")
		}
		return g.send(ctx, reqs)
	}, Config{MaxInFlight: 1})
	first := make(chan error, 1)
	go func() {
		_, err := c.Do(context.Background(), 0)
		first <- err
	}()
	waitFor(t, g.arrived, "the first call")
	errs := make(chan error, 3)
	for i := 1; i <= 3; i++ {
		go func() {
			_, err := c.Do(context.Background(), i)
			errs <- err
		}()
	}
	eventually(t, func() bool { return c.queued() == 3 }, "3 queued calls")
	g.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatalf("first call: %v", err)
	}
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrSendPanicked) {
			t.Fatalf("a call of the panicking batch = %v, want ErrSendPanicked", err)
		}
	}
	g.release <- struct{}{}
	if v, err := c.Do(context.Background(), 7); err != nil || v != "v7" {
		t.Fatalf("a call after the panic = %q, %v; want v7", v, err)
	}
}
