package lock

import "sync"

// tracked runs goroutines that its close waits for: work a request leaves behind that must
// finish before the backends it uses are closed. After close it starts nothing more.
type tracked struct {
	mu     sync.Mutex // orders Go's Add before close's Wait
	closed bool
	wg     sync.WaitGroup
}

// Go runs f in a goroutine close waits for; after close it drops f.
func (t *tracked) Go(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.wg.Go(f)
	}
}

// close stops new goroutines and waits for the running ones.
func (t *tracked) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}
