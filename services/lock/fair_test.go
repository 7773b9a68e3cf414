package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// fairBackends keep a line of waiters for fair mode (lock.QueueBackend). ZooKeeper's
// waiters always queue, natively; zklock's TestFairQueue and TestLeaveLine test its order
// and its leaving.
func fairBackends() []backendCase {
	var out []backendCase
	for _, bc := range backends {
		if bc.name == "redis" || bc.name == "mysql" || bc.name == "postgres" || bc.name == "sqlite" {
			out = append(out, bc)
		}
	}
	return out
}

// fairCutCases are the cut cases of the networked backends that keep a line of waiters.
func fairCutCases() []cutCase {
	var out []cutCase
	for _, cc := range cutCases {
		if cc.name == "redis" || cc.name == "mysql" || cc.name == "postgres" {
			out = append(out, cc)
		}
	}
	return out
}

// proxiedPair serves two instances on one store of cc, sharing events: the first reaches
// the backend through proxies the test can stall or cut, the second directly. entryTTL is
// their Config.FairEntryTTL (0: the default).
func proxiedPair(t *testing.T, cc cutCase, entryTTL time.Duration) (proxied, direct *instance, proxies []*testenv.Proxy) {
	viaProxies, straight, proxies := cc.open(t)
	busA, busB := busPair(t)
	serve := func(b lock.Backend, bus *event.Bus) *instance {
		return serveLock(t, lock.Config{Backends: map[string]lock.Backend{cc.name: b}, Recheck: -1, FairEntryTTL: entryTTL, Events: bus})
	}
	return serve(viaProxies, busA), serve(straight, busB), proxies
}

func acquireFair(ctx context.Context, c *client.Client, key string, ttl, wait time.Duration) (*lockv1.AcquireResponse, error) {
	return c.Locks().Acquire(ctx, waitFor(key, ttl, wait, true))
}

// linePair is eventPair with line entries that outlast the test: an entry's renewal is an
// attempt that finds the lock taken too, and inLine would count it as a newcomer's.
func linePair(t *testing.T, bc backendCase) (a, b *instance) {
	open := bc.store(t)
	busA, busB := busPair(t)
	serve := func(bus *event.Bus) *instance {
		in := serveLock(t, lock.Config{Backends: map[string]lock.Backend{bc.name: open(t)}, Events: bus, Recheck: -1, FairEntryTTL: 5 * time.Minute})
		in.client = bc.connectClient(in.url)
		return in
	}
	return serve(busA), serve(busB)
}

// inLine waits until n acquires in all have found the lock taken on insts, so a waiter
// started before has taken its place in line.
func inLine(t *testing.T, backend string, n float64, insts ...*instance) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		got := metricSum(t, fmt.Sprintf("coordkit_lock_contention_total{backend=%q}", backend), insts...)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %v of %v acquires found the lock taken within 30s", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFairOrder: 16 fair waiters enqueued one after another, alternating between two
// instances, get the lock in exactly that order.
func TestFairOrder(t *testing.T) {
	t.Parallel()
	for _, bc := range fairBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			a, b := linePair(t, bc)
			const waiters, key, ttl = 16, "fair", 30 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			holder := must(acquireWithin(ctx, a.client, key, ttl))(t)
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			for i := range waiters {
				c := []*client.Client{a.client, b.client}[i%2]
				wg.Go(func() {
					res, err := acquireFair(ctx, c, key, ttl, time.Minute)
					if err != nil || !res.GetAcquired() {
						t.Errorf("waiter %d = %v, %v; want acquired", i, res, err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
					l := res.GetLease()
					if _, err := c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()}); err != nil {
						t.Errorf("waiter %d: release: %v", i, err)
					}
				})
				inLine(t, bc.name, float64(i+1), a, b)
			}
			must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: holder.GetOwner(), FencingToken: holder.GetFencingToken()}))(t)
			wg.Wait()
			for i, w := range order {
				if w != i {
					t.Fatalf("waiters got the lock in the order %v, want 0..%d", order, waiters-1)
				}
			}
			if len(order) != waiters {
				t.Fatalf("%d of %d waiters got the lock", len(order), waiters)
			}
		})
	}
}

// TestFairCancelLeavesLine: of three fair waiters, the second gives up (its caller cancels);
// the third must not wait for the second's entry to lapse: it gets the lock right after the
// first releases.
func TestFairCancelLeavesLine(t *testing.T) {
	t.Parallel()
	for _, bc := range fairBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			a, b, _ := eventPair(t, bc)
			const key, ttl = "fair-cancel", 30 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			holder := must(acquireWithin(ctx, a.client, key, ttl))(t)
			start := func(ctx context.Context, c *client.Client) <-chan acquired {
				return acquireAsync(ctx, c, waitFor(key, ttl, time.Minute, true))
			}
			first := start(ctx, a.client)
			inLine(t, bc.name, 1, a, b)
			quitCtx, quit := context.WithCancel(ctx)
			second := start(quitCtx, b.client)
			inLine(t, bc.name, 2, a, b)
			third := start(ctx, a.client)
			inLine(t, bc.name, 3, a, b)
			quit()
			if r := <-second; connect.CodeOf(r.err) != connect.CodeCanceled {
				t.Fatalf("the canceled waiter = %v, %v; want canceled", r.res, r.err)
			}
			time.Sleep(100 * time.Millisecond) // its leaving reaches the backend
			must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: holder.GetOwner(), FencingToken: holder.GetFencingToken()}))(t)
			r1 := <-first
			if r1.err != nil || !r1.res.GetAcquired() {
				t.Fatalf("first waiter = %v, %v", r1.res, r1.err)
			}
			released := time.Now()
			l := r1.res.GetLease()
			must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()}))(t)
			r3 := <-third
			if r3.err != nil || !r3.res.GetAcquired() {
				t.Fatalf("third waiter = %v, %v", r3.res, r3.err)
			}
			if took := r3.at.Sub(released); took > 1500*time.Millisecond {
				t.Fatalf("the third waiter got the lock %v after the first released it: it waited for the canceled waiter's entry", took)
			}
		})
	}
}

// TestFairShutdownLeavesLine: a graceful stop of the instance a fair waiter waits through
// (SIGTERM: its waits end as unavailable, then the service and its backends close) must
// take the waiter's entry out of the line before the backend closes, even when the backend
// answers slowly just then; the next fair waiter must not wait out the entry's lease (5s)
// behind a caller that is gone.
func TestFairShutdownLeavesLine(t *testing.T) {
	t.Parallel()
	for _, cc := range fairCutCases() {
		t.Run(cc.name, func(t *testing.T) {
			t.Parallel()
			stopping, staying, proxies := proxiedPair(t, cc, 0)
			const key, ttl = "fair-shutdown", 30 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			holder := must(acquireWithin(ctx, staying.client, key, ttl))(t)
			gone := acquireAsync(ctx, stopping.client, waitFor(key, ttl, time.Minute, true))
			inLine(t, cc.name, 1, stopping, staying)
			// The stopping instance's backend falls silent for 300ms as the stop begins: its
			// waiter's leaving is still on the wire when the HTTP server has drained.
			for _, p := range proxies {
				p.Stall()
			}
			time.AfterFunc(300*time.Millisecond, func() {
				for _, p := range proxies {
					p.Resume()
				}
			})
			if err := errors.Join(stopping.stop(), stopping.svc.Close()); err != nil { // as coord serve stops
				t.Fatalf("stop: %v", err)
			}
			if r := <-gone; connect.CodeOf(r.err) != connect.CodeUnavailable {
				t.Fatalf("the stopped instance's waiter = %v, %v; want unavailable", r.res, r.err)
			}
			next := acquireAsync(ctx, staying.client, waitFor(key, ttl, time.Minute, true))
			inLine(t, cc.name, 1, staying)
			must(staying.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: holder.GetOwner(), FencingToken: holder.GetFencingToken()}))(t)
			released := time.Now()
			r := <-next
			if r.err != nil || !r.res.GetAcquired() {
				t.Fatalf("the next waiter = %v, %v", r.res, r.err)
			}
			if took := time.Since(released); took > 2500*time.Millisecond {
				t.Fatalf("the next waiter got the lock %v after the release: it waited out the stopped instance's entry", took)
			}
		})
	}
}

// TestFairDeadInstanceSkipped: the first fair waiter's instance loses its backend and is
// stopped, so its entry is never taken out of the line; the second waiter, on another
// instance, gets the lock once that entry's lease (2s here) passes, not at its own wait's end.
func TestFairDeadInstanceSkipped(t *testing.T) {
	t.Parallel()
	for _, cc := range fairCutCases() {
		t.Run(cc.name, func(t *testing.T) {
			t.Parallel()
			doomed, survivor, proxies := proxiedPair(t, cc, 2*time.Second)
			const key, ttl = "fair-dead", 30 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			holder := must(acquireWithin(ctx, survivor.client, key, ttl))(t)
			go acquireFair(ctx, doomed.client, key, ttl, time.Minute) //nolint:errcheck // it dies with its instance
			inLine(t, cc.name, 1, doomed, survivor)
			got := make(chan error, 1)
			go func() {
				res, err := acquireFair(ctx, survivor.client, key, ttl, time.Minute)
				if err == nil && !res.GetAcquired() {
					err = fmt.Errorf("not acquired: %v", res.GetHolder())
				}
				got <- err
			}()
			inLine(t, cc.name, 2, doomed, survivor)
			for _, p := range proxies {
				p.Cut() // the doomed instance can no longer leave the line
			}
			doomed.stop()
			must(survivor.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: holder.GetOwner(), FencingToken: holder.GetFencingToken()}))(t)
			released := time.Now()
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("the live waiter: %v", err)
				}
				t.Logf("the live waiter got the lock %v after the release", time.Since(released))
			case <-time.After(20 * time.Second):
				t.Fatal("the live waiter did not get the lock within 20s: the dead instance's entry was never skipped")
			}
		})
	}
}

// TestFairRefusedWithoutLine: a backend that keeps no line of waiters refuses fair mode
// with invalid_argument naming the field, rather than serve it unfairly.
func TestFairRefusedWithoutLine(t *testing.T) {
	t.Parallel()
	for _, bc := range backends {
		if bc.name != "redlock" {
			continue // the others serve it
		}
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			inst := startInstance(t, bc.name, bc.store(t)(t))
			_, err := acquireFair(context.Background(), inst.client, "k", time.Second, time.Second)
			wantCode(t, err, connect.CodeInvalidArgument)
			var ce *connect.Error
			if !errors.As(err, &ce) || !strings.HasPrefix(ce.Message(), "fair: ") {
				t.Fatalf("error %v does not start with the field's name, fair", err)
			}
		})
	}
}
