package lock_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// TestAcquireMetricCanceled: a waiter that gives up is counted as canceled, not as an error,
// so an alert on backend errors does not fire because callers use short deadlines.
func TestAcquireMetricCanceled(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	must(acquire(context.Background(), inst.client, "busy", "holder-secret-0123456789", time.Minute, 0))(t)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := acquire(ctx, inst.client, "busy", "", time.Minute, 30*time.Second)
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond) // let the waiter block
	cancel()
	wantCode(t, <-errc, connect.CodeCanceled)

	const (
		canceled = `coordkit_lock_acquire_total{backend="sqlite",result="canceled"}`
		failed   = `coordkit_lock_acquire_total{backend="sqlite",result="error"}`
	)
	// The server notices the client left a moment after the client does.
	for deadline := time.Now().Add(20 * time.Second); metricValue(t, inst.url, canceled) < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never counted the canceled waiter", canceled)
		}
	}
	if n := metricValue(t, inst.url, failed); n != 0 {
		t.Fatalf("%s = %v for a caller that canceled, want 0", failed, n)
	}
}
