package lock_test

import (
	"connectrpc.com/connect"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/testenv"
)

// watchdogRig is two service instances on one store of a backend: the holder reaches the
// first through a proxy the test can cut or stall, as a network between an app and the
// service would fail; the rival reaches the second directly, and so sees the backend's truth
// while the holder is cut off.
type watchdogRig struct {
	proxy  *testenv.Proxy
	holder *client.Client
	rival  *client.Client
}

// newWatchdogRig starts the rig; holderOpts configure the holder's client.
func newWatchdogRig(t *testing.T, bc backendCase, holderOpts ...client.Option) *watchdogRig {
	t.Helper()
	open := bc.store(t)
	a := startInstance(t, bc.name, open(t))
	b := startInstance(t, bc.name, open(t))
	p := testenv.NewProxy(t, strings.TrimPrefix(a.url, "http://"))
	return &watchdogRig{proxy: p, holder: client.New("http://"+p.Addr(), holderOpts...), rival: grpcClient(b.url)}
}

// awaitRenewal waits for the watchdog's next confirmed renewal and returns the expiry it
// reported, so that a test can time a fault against the renewal cadence.
func awaitRenewal(t *testing.T, l *client.Lock, timeout time.Duration) time.Time {
	t.Helper()
	before := l.ExpiresAt()
	deadline := time.Now().Add(timeout)
	for {
		if exp := l.ExpiresAt(); !exp.Equal(before) {
			return exp
		}
		select {
		case <-l.Lost():
			t.Fatalf("lease lost while waiting for a renewal with the service up: %v", l.Err())
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewal within %v (expiry still %v)", timeout, before)
		}
	}
}

// unlockQuietly releases l in the test's cleanup path with a bound, since the proxy may still
// be holding traffic.
func unlockQuietly(l *client.Lock) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return l.Unlock(ctx)
}

// watchRivals has another owner try key every few milliseconds through c until the returned
// stop is called, and fails the test if it ever gets the lock: the holder's lease must keep
// the key for as long as its watchdog vouches for it. stop may be called more than once.
func watchRivals(t *testing.T, c *client.Client, key string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := acquire(ctx, c, key, "", time.Second, 0)
			cancel()
			switch {
			case connect.CodeOf(err) == connect.CodeUnavailable:
				// An overloaded host makes a Redlock node miss its timeout: the rival did not
				// get the lock, which is all this watches for.
			case err != nil:
				t.Errorf("rival's try on %q: %v, want a plain refusal while the lock is held", key, err)
				return
			case res.GetAcquired():
				t.Errorf("rival acquired %q (token %d) while the holder's watchdog kept it: two holders", key, res.GetLease().GetFencingToken())
				return
			}
		}
	})
	return sync.OnceFunc(func() {
		close(done)
		wg.Wait()
	})
}

// oversleepGauge measures how late the test's own short sleeps wake until the returned
// function is called, which returns the worst lateness seen: it tells a runtime too starved
// to run anything on time from a watchdog that is late by itself.
func oversleepGauge() func() time.Duration {
	const nap = 5 * time.Millisecond
	done := make(chan struct{})
	worst := make(chan time.Duration, 1)
	go func() {
		var w time.Duration
		defer func() { worst <- w }()
		for {
			start := time.Now()
			select {
			case <-done:
				return
			case <-time.After(nap):
			}
			w = max(w, time.Since(start)-nap)
		}
	}()
	return func() time.Duration {
		close(done)
		return <-worst
	}
}
