package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redlock"
)

// redlockStore isolates a test on the shared Redlock dev nodes by a key prefix, cleaned on
// every node when the test ends; each backend instance opens its own clients, as another
// service process would.
func redlockStore(t *testing.T) func(t *testing.T) lock.Backend {
	prefix := testenv.Prefix(t)
	for _, addr := range testenv.RedlockAddrs() {
		testenv.CleanRedis(t, testenv.Redis(t, addr), prefix)
	}
	return func(t *testing.T) lock.Backend {
		return openRedlock(t, testenv.RedlockAddrs(), prefix)
	}
}

// testNodeTimeout replaces the 50ms production default in tests: under -race on a two-core
// machine running every backend's suite at once, a burst of a few hundred cold connection
// setups (DistinctKeysConcurrently) takes about 200ms. The backend still caps it at a tenth of
// each lock's ttl, so the short-ttl behaviours run with the production cap.
const testNodeTimeout = time.Second

// openRedlock opens a redlock backend on addrs, closed when the test ends.
func openRedlock(t *testing.T, addrs []string, prefix string) *redlock.Backend {
	t.Helper()
	b, err := redlock.Open(context.Background(), addrs, redlock.Config{Prefix: prefix, NodeTimeout: testNodeTimeout})
	if err != nil {
		t.Fatalf("open redlock on %v: %v", addrs, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
