package lock_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// TestShutdownEndsWaits: a SIGTERM-style shutdown must not hang on an Acquire blocked for a
// long wait; on every backend the waiter gets unavailable (retry elsewhere), never canceled
// (which a client reads as its own doing), and the server drains cleanly.
func TestShutdownEndsWaits(t *testing.T) {
	t.Parallel()
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			inst := startInstance(t, bc.name, bc.store(t)(t))
			ctx := context.Background()
			must(acquire(ctx, inst.client, "busy", "holder-secret-0123456789", time.Minute, 0))(t)
			errc := make(chan error, 1)
			go func() {
				_, err := acquire(ctx, inst.client, "busy", "", time.Minute, 30*time.Second)
				errc <- err
			}()
			time.Sleep(300 * time.Millisecond) // let the waiter block
			select {
			case err := <-errc:
				t.Fatalf("waiter ended before the shutdown: %v", err)
			default:
			}
			start := time.Now()
			if err := inst.stop(); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("shutdown took %v with a waiter blocked", took)
			}
			select {
			case err := <-errc:
				wantCode(t, err, connect.CodeUnavailable)
			case <-time.After(10 * time.Second):
				t.Fatal("waiter still blocked after shutdown")
			}
		})
	}
}
