package zklock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitEndsWithCause: a wait ended by its context reports the context's cause, such as
// the server's shutdown (which callers must see as unavailable), not just "canceled", and
// leaves the line before it returns, not through housekeeping: the server closes its
// backends right after its calls end, and a waiter node left behind would hold the line for
// its ttl (the wait plus waitGrace, here 22s).
func TestWaitEndsWithCause(t *testing.T) {
	t.Parallel()
	root := testRoot(t)
	const key = "cause"
	// The waiter's session outlasts waitLine's 5s: only leave can empty the line in time.
	holder, waiter := openTest(t, root), openSession(t, root, 15*time.Second)
	mustAcquire(t, holder, key, "holder", 0)
	shutdown := errors.New("test: server shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := waiter.AcquireWait(ctx, key, "w", 30*time.Second, 20*time.Second)
		done <- err
	}()
	waitLine(t, holder, key, 2)
	cancel(shutdown)
	select {
	case err := <-done:
		if !errors.Is(err, shutdown) {
			t.Fatalf("wait ended by its context: %v, want the cause %v", err, shutdown)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait still running 5s after its context ended")
	}
	// Gone already, read through the waiter's own session (which sees its own writes), not
	// left for housekeeping or Close to take back.
	names, _, err := waiter.conn.Children(waiter.parentPath(key))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(queueOrder(names)); n != 1 {
		t.Fatalf("the line has %d nodes when the wait has returned, want 1 (the holder's)", n)
	}
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, holder, key, 1)
}
