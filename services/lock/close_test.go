package lock_test

import (
	"sync/atomic"
	"testing"

	"github.com/coordkit/coordkit/services/lock"
)

// closeCounting is a backend that counts its Close calls.
type closeCounting struct {
	lock.Backend
	closed atomic.Int32
}

// Close implements lock.Backend.
func (c *closeCounting) Close() error { c.closed.Add(1); return nil }

// TestServiceCloseLeavesBackends: the service closes none of its backends; whoever opened
// them (lockservice.Open's Mounted.Close, a test) closes them after it.
func TestServiceCloseLeavesBackends(t *testing.T) {
	t.Parallel()
	b := &closeCounting{Backend: sqliteStore(t)(t)}
	svc, err := lock.NewService(lock.Config{Backends: map[string]lock.Backend{"sqlite": b}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if n := b.closed.Load(); n != 0 {
		t.Fatalf("Service.Close closed the backend %d times, want 0: the opener closes it", n)
	}
}
