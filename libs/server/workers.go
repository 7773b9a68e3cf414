package server

import (
	"sync/atomic"
	"time"
)

// Workers for batched operations. A batch runs each operation on a goroutine of its own
// (RunBatch); a new goroutine starts on a small stack, which the deep calls of a backend's
// client then grow, copying it, every time. An operation handed to an idle worker instead
// starts on a stack earlier operations already grew: measured, 5-8% of the service's CPU at
// 16 clients. Workers are made on demand, never waited for: an operation that finds none
// idle gets a new one at once.

const (
	// maxIdleWorkers bounds the workers kept idle after a burst, and so their memory.
	maxIdleWorkers = 256
	// workerIdle is how long a worker waits for more work before it ends.
	workerIdle = 10 * time.Second
)

var (
	work        = make(chan func()) // unbuffered: a send succeeds only into an idle worker's hands
	idleWorkers atomic.Int32
)

// goWork runs f on an idle worker, or on a new one if none is idle.
func goWork(f func()) {
	select {
	case work <- f:
	default:
		go worker(f)
	}
}

// worker runs f, then whatever work it is handed, until it has been idle for workerIdle or
// maxIdleWorkers others are idle already.
func worker(f func()) {
	var idle *time.Timer
	for {
		f()
		if idleWorkers.Add(1) > maxIdleWorkers {
			idleWorkers.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case f = <-work:
			idleWorkers.Add(-1)
		case <-idle.C:
			idleWorkers.Add(-1)
			return
		}
	}
}
