package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// TestDoAllAloneIsOneBatch: operations handed over together while nothing is in flight leave
// at once as one batch, on the caller's goroutine with its own context, each with its own
// result.
func TestDoAllAloneIsOneBatch(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "mine")
	var got []context.Context
	send := func(ctx context.Context, reqs []int) ([]Result[string], error) {
		got = append(got, ctx) // no lock: must run on the caller's goroutine, before DoAll returns
		return answers(reqs), nil
	}
	c := New(send, Config{MaxInFlight: 1})
	res := c.DoAll(ctx, []int{1, -2, 3})
	if len(got) != 1 || got[0].Value(key{}) != "mine" {
		t.Fatalf("%d batches, want one sent with the caller's context", len(got))
	}
	if res[0].Value != "v1" || res[1].Err == nil || res[2].Value != "v3" {
		t.Errorf("results %v, want v1, an error, v3", res)
	}
	if res := c.DoAll(ctx, nil); len(res) != 0 {
		t.Errorf("no operations: %v", res)
	}
}

// TestDoAllQueuesBehindBusySlots: operations handed over while every slot is busy take no slot
// of their own: they queue and leave with the other queued calls, and a batch larger than
// MaxBatch leaves in MaxBatch pieces; never more batches in flight than allowed.
func TestDoAllQueuesBehindBusySlots(t *testing.T) {
	g := newGate()
	c := New(g.send, Config{MaxInFlight: 1, MaxBatch: 4})
	first := make(chan error, 1)
	go func() { _, err := c.Do(context.Background(), 100); first <- err }()
	waitFor(t, g.arrived, "the first batch")
	done := make(chan []Result[string], 1)
	go func() { done <- c.DoAll(context.Background(), []int{1, 2, 3, 4, 5, 6}) }()
	eventually(t, func() bool { return c.queued() == 6 }, "6 queued operations")
	go func() { _, _ = c.Do(context.Background(), 7) }()
	eventually(t, func() bool { return c.queued() == 7 }, "7 queued operations")
	for range 3 {
		g.release <- struct{}{}
	}
	res := <-done
	for i, r := range res {
		if r.Err != nil || r.Value != fmt.Sprint("v", i+1) {
			t.Errorf("operation %d: %v", i+1, r)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	want := [][]int{{100}, {1, 2, 3, 4}, {5, 6, 7}}
	if b := g.snapshot(); !slices.EqualFunc(b, want, slices.Equal) {
		t.Errorf("batches %v, want %v", b, want)
	}
}

// TestDoAllGivesUpQueued: when the caller's context ends while its operations queue, they
// are never sent and get its cause.
func TestDoAllGivesUpQueued(t *testing.T) {
	g := newGate()
	c := New(g.send, Config{MaxInFlight: 1})
	go func() { _, _ = c.Do(context.Background(), 100) }()
	waitFor(t, g.arrived, "the first batch")
	cause := errors.New("caller gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan []Result[string], 1)
	go func() { done <- c.DoAll(ctx, []int{1, 2}) }()
	eventually(t, func() bool { return c.queued() == 2 }, "2 queued operations")
	cancel(cause)
	for _, r := range <-done {
		if !errors.Is(r.Err, cause) {
			t.Errorf("queued operation: %v, want the caller's cause", r)
		}
	}
	if c.queued() != 0 {
		t.Errorf("%d operations still queued", c.queued())
	}
	g.release <- struct{}{}
	if b := g.snapshot(); len(b) != 1 {
		t.Errorf("batches %v: the given-up operations were sent", b)
	}
}

// TestDoAllUnderLoad: many callers handing over many operations at once, with single calls
// mixed in: every operation answered once, with its own result, never more batches in flight
// than allowed.
func TestDoAllUnderLoad(t *testing.T) {
	const maxInFlight = 2
	d := &doubler{maxBatch: 16}
	c := New(d.send, Config{MaxInFlight: maxInFlight, MaxBatch: 16})
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for round := range 50 {
				if g%4 == 0 {
					if v, err := c.Do(context.Background(), round); err != nil || v != round*2 {
						t.Errorf("Do(%d) = %d, %v", round, v, err)
					}
					continue
				}
				reqs := make([]int, 1+(g+round)%24)
				for i := range reqs {
					reqs[i] = g*1000 + i
				}
				for i, r := range c.DoAll(context.Background(), reqs) {
					if r.Err != nil || r.Value != reqs[i]*2 {
						t.Errorf("DoAll operation %d: %v, want %d", i, r, reqs[i]*2)
					}
				}
			}
		})
	}
	wg.Wait()
	if p := d.peak.Load(); p > maxInFlight {
		t.Errorf("%d batches in flight at once, the limit is %d", p, maxInFlight)
	}
}
