package taskpick_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/services/taskpick"
)

// Limits on Pick, on every backend (rows of the conformance table).

// testMaxLeasedExact: three instances over one store, 32 workers picking a pool limited to 5
// and holding each task a while. The live leases, counted by the workers themselves (up when
// a Pick answered, down before the Ack), never pass 5, and reach it.
func testMaxLeasedExact(t *testing.T, b backendCase) {
	open, bus := b.store(t), embeddedBus(t)
	var ins []*instance
	for range 3 {
		ins = append(ins, startInstance(t, b.name, open(t), bus))
	}
	p := pool(t, "limit5")
	if got := setSettings(t, ins[0], p, &taskpickv1.PoolSettings{MaxLeased: 5}); got.GetMaxLeased() != 5 {
		t.Fatalf("SetPoolSettings answered %v", got)
	}
	const tasks = 25
	var batch []*taskpickv1.NewTask
	for i := range tasks {
		batch = append(batch, task(fmt.Sprint("t", i)))
	}
	put(t, ins[1], p, batch...)
	wctx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	var live, most, acked atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		in := ins[w%3]
		wg.Go(func() {
			for wctx.Err() == nil {
				r, err := in.client.Pick(wctx, &taskpickv1.PickRequest{Pool: p, Ttl: sec(time.Minute), Wait: sec(10 * time.Second)})
				if err != nil {
					return // stopped
				}
				for _, l := range r.GetTasks() {
					n := live.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(150 * time.Millisecond) // long enough for all five places to fill
					live.Add(-1)
					if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: l.GetId(), LeaseToken: l.GetLeaseToken(), LeaseSecret: l.GetLeaseSecret()}); err != nil {
						t.Errorf("Ack: %v", err)
					}
					if acked.Add(1) == tasks {
						stop()
					}
				}
			}
		})
	}
	wg.Wait()
	if acked.Load() != tasks {
		t.Fatalf("acked %d of %d tasks in a minute", acked.Load(), tasks)
	}
	if m := most.Load(); m != 5 {
		t.Fatalf("most live leases at once: %d, want 5 (the limit)", m)
	}
}

// testMaxLeasedWakes: a Pick waiting for a place in a limited pool waits (it does not spin),
// and is woken by the Ack, on another instance, that frees one, by a raised limit, and by a
// Nack that delays its task (and so announces no available task).
// Recheck is an hour and the leases long: only the announcements can end the waits in time.
func testMaxLeasedWakes(t *testing.T, b backendCase) {
	open, bus := b.store(t), embeddedBus(t)
	hour := func(c *taskpick.Config) { c.Recheck = time.Hour }
	cb := &countingBackend{Backend: open(t)}
	waiting, acking := startInstance(t, b.name, cb, bus, hour), startInstance(t, b.name, open(t), bus, hour)
	p := pool(t, "limitwake")
	setSettings(t, acking, p, &taskpickv1.PoolSettings{MaxLeased: 1})
	put(t, acking, p, task("a"), task("b"), task("c"), task("d"))
	held := pick(t, acking, &taskpickv1.PickRequest{Pool: p, Count: 3, Ttl: sec(time.Minute)})
	if len(held) != 1 {
		t.Fatalf("a Pick of 3 in a pool limited to 1 leased %v", ids(held))
	}
	if got := pick(t, waiting, &taskpickv1.PickRequest{Pool: p}); len(got) != 0 {
		t.Fatalf("a Pick over the limit leased %v", ids(got))
	}
	done := make(chan []*taskpickv1.LeasedTask, 2)
	waitPick := func() {
		r, err := waiting.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Ttl: sec(time.Minute), Wait: sec(time.Minute)})
		if err != nil {
			t.Errorf("waiting Pick: %v", err)
		}
		done <- r.GetTasks()
	}
	before := cb.picks.Load()
	go waitPick()
	time.Sleep(500 * time.Millisecond)
	if n := cb.picks.Load() - before; n > 3 {
		t.Fatalf("a Pick waiting for a place tried %d times in 500ms: it must wait, not spin", n)
	}
	select {
	case got := <-done:
		t.Fatalf("a Pick over the limit answered %v", ids(got))
	default:
	}
	l := held[0]
	acked := time.Now()
	if _, err := acking.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: l.GetId(), LeaseToken: l.GetLeaseToken(), LeaseSecret: l.GetLeaseSecret()}); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	select {
	case got := <-done:
		if len(got) != 1 {
			t.Fatalf("woken Pick leased %v, want one task", ids(got))
		}
		t.Logf("waiting Pick woke %v after the Ack on another instance", time.Since(acked))
	case <-time.After(20 * time.Second):
		t.Fatal("an Ack of a limited pool did not wake a Pick waiting for a place")
	}
	// The place is taken again; a raised limit lets the next waiter in.
	go waitPick()
	time.Sleep(200 * time.Millisecond)
	setSettings(t, acking, p, &taskpickv1.PoolSettings{MaxLeased: 2})
	var second *taskpickv1.LeasedTask
	select {
	case got := <-done:
		if len(got) != 1 {
			t.Fatalf("woken Pick leased %v, want one task", ids(got))
		}
		second = got[0]
	case <-time.After(20 * time.Second):
		t.Fatal("raising the limit did not wake a Pick waiting for a place")
	}
	// Both places taken again; a Nack that delays its task for an hour frees one.
	go waitPick()
	time.Sleep(200 * time.Millisecond)
	nacked := time.Now()
	if _, err := acking.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: second.GetId(), LeaseToken: second.GetLeaseToken(),
		LeaseSecret: second.GetLeaseSecret(), RetryAfter: sec(time.Hour)}); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	select {
	case got := <-done:
		if len(got) != 1 {
			t.Fatalf("woken Pick leased %v, want one task", ids(got))
		}
		t.Logf("waiting Pick woke %v after the Nack on another instance", time.Since(nacked))
	case <-time.After(20 * time.Second):
		t.Fatal("a delaying Nack of a limited pool did not wake a Pick waiting for a place")
	}
}

// testMaxLeasedEdges: 0 is no limit; expired leases take no place (this instance runs no
// sweep, so they are still leased in the store).
func testMaxLeasedEdges(t *testing.T, b backendCase) {
	in := startInstance(t, b.name, b.store(t)(t), embeddedBus(t), func(c *taskpick.Config) { c.SweepInterval = time.Hour })
	p := pool(t, "limitedges")
	var batch []*taskpickv1.NewTask
	for i := range 12 {
		batch = append(batch, task(fmt.Sprint("t", i)))
	}
	put(t, in, p, batch...)
	setSettings(t, in, p, &taskpickv1.PoolSettings{MaxLeased: 2})
	if got := getSettings(t, in, p).GetSettings().GetMaxLeased(); got != 2 {
		t.Fatalf("GetPoolSettings max_leased %d, want 2", got)
	}
	if got := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 5, Ttl: sec(time.Second)}); len(got) != 2 {
		t.Fatalf("a Pick of 5 in a pool limited to 2 leased %v", ids(got))
	}
	if got := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 5}); len(got) != 0 {
		t.Fatalf("a Pick at the limit leased %v", ids(got))
	}
	// The two leases end within a second; the waiting Pick wakes at their end.
	if got := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 5, Ttl: sec(time.Minute), Wait: sec(20 * time.Second)}); len(got) != 2 {
		t.Fatalf("after the leases expired a Pick leased %v, want 2", ids(got))
	}
	setSettings(t, in, p, &taskpickv1.PoolSettings{}) // 0: no limit
	// 8 are left, or 10 where another test's sweep (MySQL's rows share a table) recovered
	// the expired two.
	if got := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 10}); len(got) < 8 {
		t.Fatalf("without a limit a Pick of 10 leased %d, want all that are left (8 or 10)", len(got))
	}
}

// testRateLimit: two instances over one store, 8 workers picking a pool limited to 5 tasks a
// second with a burst of 2 for about 2 s: they lease no more than the bucket allows (generous
// bounds), more than the burst (tokens come back), and the waiting Picks wait for the next
// token rather than spin.
func testRateLimit(t *testing.T, b backendCase) {
	open, bus := b.store(t), embeddedBus(t)
	cb := &countingBackend{Backend: open(t)}
	ins := []*instance{startInstance(t, b.name, cb, bus), startInstance(t, b.name, open(t), bus)}
	p := pool(t, "rate")
	got := setSettings(t, ins[0], p, &taskpickv1.PoolSettings{Rate: 5, Burst: 2})
	if got.GetRate() != 5 || got.GetBurst() != 2 || getSettings(t, ins[1], p).GetSettings().GetRate() != 5 {
		t.Fatalf("SetPoolSettings answered %v", got)
	}
	var batch []*taskpickv1.NewTask
	for i := range 40 {
		batch = append(batch, task(fmt.Sprint("t", i)))
	}
	put(t, ins[1], p, batch...)
	const window = 2 * time.Second
	start := time.Now()
	wctx, stop := context.WithTimeout(ctx, window)
	defer stop()
	var leased atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		in := ins[w%2]
		wg.Go(func() {
			for wctx.Err() == nil {
				r, err := in.client.Pick(wctx, &taskpickv1.PickRequest{Pool: p, Count: 3, Ttl: sec(time.Minute), Wait: sec(time.Minute)})
				if err != nil {
					return
				}
				leased.Add(int64(len(r.GetTasks())))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := leased.Load()
	// Tokens: the burst, plus 5 a second from the first pick on, plus slack for the clocks.
	if most := int64(2 + 5*elapsed.Seconds() + 2); n > most {
		t.Fatalf("leased %d tasks in %v at 5 a second with a burst of 2, want at most %d", n, elapsed, most)
	}
	if n <= 2 {
		t.Fatalf("leased %d tasks in %v: the bucket never refilled", n, elapsed)
	}
	if tries := cb.picks.Load(); tries > 300 {
		t.Fatalf("%d pick attempts on one instance in %v: waiting Picks must wait for the next token, not spin", tries, elapsed)
	}
	t.Logf("leased %d tasks in %v; %d pick attempts on one instance", n, elapsed, cb.picks.Load())
}

// TestRefill checks the token bucket every SQL engine computes (Redis computes the same in
// Lua): full before first use, refilled at the rate up to the burst, and the wait for the
// next token never 0 while there is none (a waiting Pick would spin).
func TestRefill(t *testing.T) {
	for _, c := range []struct {
		name      string
		rate      float64
		burst     uint32
		tokens    float64
		last, now int64
		have      float64
		next      int64
	}{
		{"never used is full", 5, 3, 0, 0, 1000, 3, 0},
		{"burst 0 holds one", 5, 0, 0, 0, 1000, 1, 0},
		{"refills at the rate", 5, 10, 0, 1000, 1400, 2, 0},
		{"capped at the burst", 5, 2, 1, 1000, 100000, 2, 0},
		{"empty waits for the next token", 5, 2, 0.5, 1000, 1000, 0.5, 100},
		{"a clock step back refills nothing", 5, 2, 0.5, 2000, 1000, 0.5, 100},
		{"a tiny deficit still waits 1 ms", 1e6, 1, 1 - 1e-12, 1000, 1000, 1 - 1e-12, 1},
		{"slow rates wait long", 0.5, 1, 0, 1000, 1000, 0, 2000},
	} {
		have, next := taskpick.Refill(c.rate, c.burst, c.tokens, c.last, c.now)
		if have != c.have || next != c.next {
			t.Errorf("%s: Refill = %v, %d; want %v, %d", c.name, have, next, c.have, c.next)
		}
	}
}
