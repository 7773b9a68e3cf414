package server

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunBatchAllAtOnce: every operation of a batch runs at the same time, whether idle
// workers are there to take them or not (each operation here waits until all have started,
// so one left waiting for a busy worker would hang the batch); panics fail only their own
// operation; and a burst leaves at most maxIdleWorkers workers idle.
func TestRunBatchAllAtOnce(t *testing.T) {
	for round, n := range []int{1, 2, 50, 1000, 1000, 3} {
		var started sync.WaitGroup
		started.Add(n)
		all := make(chan struct{})
		go func() { started.Wait(); close(all) }()
		var ran atomic.Int32
		var panicked []int
		var mu sync.Mutex
		done := make(chan struct{})
		go func() {
			defer close(done)
			RunBatch(n, func(i int) {
				started.Done()
				select {
				case <-all:
				case <-time.After(time.Minute):
					t.Errorf("round %d: operation %d still waiting for the others after a minute", round, i)
				}
				ran.Add(1)
				if i%7 == 3 {
					panic(i)
				}
			}, func(i int, p any) {
				mu.Lock()
				defer mu.Unlock()
				if p != i {
					t.Errorf("round %d: operation %d recovered %v", round, i, p)
				}
				panicked = append(panicked, i)
			})
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("round %d: RunBatch(%d) did not return", round, n)
		}
		wantPanics := 0
		for i := range n {
			if i%7 == 3 {
				wantPanics++
			}
		}
		if int(ran.Load()) != n || len(panicked) != wantPanics {
			t.Fatalf("round %d: %d of %d operations ran, %d panics recovered, want %d", round, ran.Load(), n, len(panicked), wantPanics)
		}
		// A worker over the bound counts itself idle for a moment before it takes itself off
		// again and exits (on a starved host, long enough to be seen): give the burst's last
		// workers a moment to settle. A real excess stays for workerIdle (10s), far longer.
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
			idle := idleWorkers.Load()
			if idle <= maxIdleWorkers {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d workers idle 2s after the burst, want at most %d", round, idle, maxIdleWorkers)
			}
		}
	}
}
