package lock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// pollingBackends are the backends whose waiters the service wakes (ZooKeeper's wait on
// their own predecessor's watch).
func pollingBackends() []backendCase {
	var out []backendCase
	for _, bc := range backends {
		if bc.name != "zookeeper" {
			out = append(out, bc)
		}
	}
	return out
}

// TestReleaseCostsOneAttemptPerInstance: 100 waiters on one key over two instances, each
// taking the lock in turn and releasing it at once. A release wakes one waiter per instance,
// not all of them: on average at most 2 attempts per instance per release.
func TestReleaseCostsOneAttemptPerInstance(t *testing.T) {
	t.Parallel()
	for _, bc := range pollingBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			a, b, _ := eventPair(t, bc)
			insts := []*instance{a, b}
			const waiters, key, ttl = 100, "hot", 30 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			first := must(acquireWithin(ctx, a.client, key, ttl))(t)
			contended := func() float64 {
				return metricSum(t, fmt.Sprintf("coordkit_lock_contention_total{backend=%q}", bc.name), insts...)
			}
			base := contended()
			var wg sync.WaitGroup
			var got atomic.Int64
			for i := range waiters {
				c := insts[i%2].client
				wg.Go(func() {
					res, err := acquire(ctx, c, key, "", ttl, 90*time.Second)
					if err != nil || !res.GetAcquired() {
						t.Errorf("waiter %d = %v, %v; want acquired", i, res, err)
						return
					}
					got.Add(1)
					l := res.GetLease()
					if _, err := c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()}); err != nil {
						t.Errorf("waiter %d: release: %v", i, err)
					}
				})
			}
			// Every waiter in line (its first attempt found the lock taken) before the first release.
			for deadline := time.Now().Add(time.Minute); contended()-base < waiters; {
				if time.Now().After(deadline) {
					t.Fatalf("only %v of %d waiters found the lock taken within a minute", contended()-base, waiters)
				}
				time.Sleep(20 * time.Millisecond)
			}
			must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: first.GetOwner(), FencingToken: first.GetFencingToken()}))(t)
			wg.Wait()
			attempts := metricSum(t, fmt.Sprintf("coordkit_lock_waiter_attempts_total{backend=%q}", bc.name), insts...)
			freed := metricSum(t, fmt.Sprintf("coordkit_lock_release_total{backend=%q,result=\"freed\"}", bc.name), insts...)
			perInstance := attempts / freed / float64(len(insts))
			t.Logf("%d waiters: %v attempts after the first for %v releases: %.2f per instance per release", got.Load(), attempts, freed, perInstance)
			if got.Load() != waiters {
				t.Fatalf("%d of %d waiters got the lock", got.Load(), waiters)
			}
			if perInstance > 2 {
				t.Fatalf("%.2f attempts per instance per release, want at most 2: releases wake more than one waiter per instance", perInstance)
			}
		})
	}
}

// TestWaitersOutliveNATS: waiters on two instances keep taking a hot lock while their NATS
// is killed (they poll), and go back to push once it is restarted.
func TestWaitersOutliveNATS(t *testing.T) {
	t.Parallel()
	for _, bc := range pollingBackends() {
		if bc.name != "redis" && bc.name != "sqlite" {
			continue
		}
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			nats := testenv.StartNATS(t)
			open := bc.store(t)
			buses := []*event.Bus{openBus(t, event.Config{URL: nats.URL()}), openBus(t, event.Config{URL: nats.URL()})}
			a := startInstanceWith(t, bc.name, open(t), buses[0])
			b := startInstanceWith(t, bc.name, open(t), buses[1])
			// connected waits until both instances see NATS as want.
			connected := func(want bool) {
				t.Helper()
				for _, bus := range buses {
					for deadline := time.Now().Add(15 * time.Second); bus.Connected() != want; {
						if time.Now().After(deadline) {
							t.Fatalf("an instance's NATS connection did not become connected=%v within 15s", want)
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			}
			const key, ttl = "hot", 30 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// handoffs passes the lock between the instances n times: a holder on one
			// releases while a waiter on the other waits; each handoff must take well under
			// the holder's ttl.
			handoffs := func(phase string, n int) {
				t.Helper()
				for i := range n {
					from, to := a.client, b.client
					if i%2 == 1 {
						from, to = to, from
					}
					held := must(acquireWithin(ctx, from, key, ttl))(t)
					done := make(chan error, 1)
					go func() {
						res, err := acquire(ctx, to, key, "", ttl, 20*time.Second)
						if err == nil && !res.GetAcquired() {
							err = fmt.Errorf("not acquired: %v", res.GetHolder())
						}
						if err == nil {
							l := res.GetLease()
							_, err = to.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()})
						}
						done <- err
					}()
					time.Sleep(5 * time.Millisecond)
					must(from.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}))(t)
					select {
					case err := <-done:
						if err != nil {
							t.Fatalf("%s: handoff %d: %v", phase, i, err)
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("%s: handoff %d took over 10s", phase, i)
					}
				}
			}
			pushed := func() float64 {
				return metricSum(t, fmt.Sprintf("coordkit_lock_wakeups_total{backend=%q,cause=\"event\"}", bc.name), a, b)
			}
			handoffs("NATS up", 10)
			if pushed() == 0 {
				t.Fatal("no waiter was woken by an event while NATS was up")
			}
			// Killed mid-wait: a waiter already waiting for a push must notice and poll.
			held := must(acquireWithin(ctx, a.client, key, ttl))(t)
			waited := make(chan error, 1)
			go func() {
				res, err := acquire(ctx, b.client, key, "", ttl, 20*time.Second)
				if err == nil && !res.GetAcquired() {
					err = fmt.Errorf("not acquired: %v", res.GetHolder())
				}
				if err == nil {
					l := res.GetLease()
					_, err = b.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()})
				}
				waited <- err
			}()
			time.Sleep(200 * time.Millisecond) // the waiter is in line, waiting for a push
			nats.Stop()
			connected(false)
			must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}))(t)
			select {
			case err := <-waited:
				if err != nil {
					t.Fatalf("the waiter of a lock released while NATS was down: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter of a lock released while NATS was down did not get it within 10s")
			}
			handoffs("NATS down", 10)
			nats.Start()
			connected(true)
			before := pushed()
			handoffs("NATS back", 10)
			if pushed() == before {
				t.Fatal("no waiter was woken by an event after NATS came back: push did not resume")
			}
		})
	}
}

// TestPrivateEmbeddedBus: on an embedded NATS that accepts no outside clients (the default
// of `coord serve`), the instance subscribes to nothing of its own and publishes only what
// someone watches; its waiters are still woken at once by its own releases, both plain and
// fair; a second lock service sharing the bus (a library user's process) is woken by the
// first's releases; and a Watch still sees every event from the moment it is in force.
func TestPrivateEmbeddedBus(t *testing.T) {
	t.Parallel()
	for _, bc := range pollingBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			open := bc.store(t)
			bus := openBus(t, event.Config{})
			b := open(t)
			in := startInstanceWith(t, bc.name, b, bus)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, fair := range []bool{false, true} {
				if _, queues := b.(lock.QueueBackend); fair && !queues {
					continue // no line of waiters to be fair with
				}
				handOver(ctx, t, in, in, fmt.Sprintf("private-%v", fair), fair)
			}
			handOver(ctx, t, in, startInstanceWith(t, bc.name, open(t), bus), "private-shared", false)

			const key, ttl = "private-watched", 30 * time.Second
			msgs, _ := watchStream(ctx, t, in.client.Locks(), &lockv1.WatchRequest{Key: key})
			if st := nextMsg(t, msgs, "the state").GetState(); st.GetHeld() {
				t.Fatalf("first message = %v, want the free state", st)
			}
			held := must(acquireWithin(ctx, in.client, key, ttl))(t)
			must(in.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}))(t)
			for _, want := range []lockv1.LockEventKind{lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED, lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED} {
				ev := nextMsg(t, msgs, want.String()).GetEvent()
				if ev.GetKind() != want || ev.GetKey() != key || ev.GetFencingToken() != held.GetFencingToken() {
					t.Fatalf("watch got %v, want %v of token %d", ev, want, held.GetFencingToken())
				}
			}
		})
	}
}

// handOver has a holder on from release key while a waiter on to waits for it, and fails
// unless the waiter got the lock well before the holder's 30s ttl: the instances' periodic
// re-check is off, so a missed wake-up shows as a wait until the waiter's 20s wait ends.
func handOver(ctx context.Context, t *testing.T, from, to *instance, key string, fair bool) {
	t.Helper()
	const ttl = 30 * time.Second
	held := must(acquireWithin(ctx, from.client, key, ttl))(t)
	waiting := acquireAsync(ctx, to.client, waitFor(key, ttl, 20*time.Second, fair))
	time.Sleep(200 * time.Millisecond) // the waiter is in line
	released := time.Now()
	must(from.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}))(t)
	got := <-waiting
	if got.err != nil || !got.res.GetAcquired() {
		t.Fatalf("%s (fair=%v): waiter = %v, %v; want acquired (not woken by the release within its 20s wait)", key, fair, got.res, got.err)
	}
	if d := got.at.Sub(released); d > 10*time.Second {
		t.Fatalf("%s (fair=%v): the waiter got the lock %v after the release: not woken by it", key, fair, d)
	}
	l := got.res.GetLease()
	must(to.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()}))(t)
}
