package sqllock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// scriptOp is one lock operation of a test script, run as a batch step or as its single call.
type scriptOp struct {
	kind  lock.StepKind
	key   string
	owner string
	ttl   time.Duration
	token uint64 // Release's; tokenOf picks it from an earlier answer instead
}

func acq(key, owner string) scriptOp {
	return scriptOp{kind: lock.StepTryAcquire, key: key, owner: owner, ttl: time.Minute}
}
func rel(key, owner string, token uint64) scriptOp {
	return scriptOp{kind: lock.StepRelease, key: key, owner: owner, token: token}
}
func ren(key, owner string, ttl time.Duration) scriptOp {
	return scriptOp{kind: lock.StepRenew, key: key, owner: owner, ttl: ttl}
}
func insp(key string) scriptOp { return scriptOp{kind: lock.StepInspect, key: key} }

func (o scriptOp) step() *lock.Step {
	return &lock.Step{Kind: o.kind, Key: o.key, Owner: o.owner, TTL: o.ttl, Token: o.token}
}

// answer is what a step's results say, without what differs between two runs of the same
// script (random holder ids, instants).
func answer(st *lock.Step) string {
	switch st.Kind {
	case lock.StepTryAcquire:
		a := st.Attempt
		return fmt.Sprintf("acquire %v token %d holds %d; holder %v/%d/%d; %v", a.Acquired, a.Lease.FencingToken, a.Lease.HoldCount,
			a.Holder.Held, a.Holder.FencingToken, a.Holder.HoldCount, st.Err)
	case lock.StepRelease:
		return fmt.Sprintf("release %d token %d; %v", st.Remaining, st.Released.FencingToken, st.Err)
	case lock.StepRenew:
		return fmt.Sprintf("renew token %d holds %d; %v", st.Lease.FencingToken, st.Lease.HoldCount, st.Err)
	}
	return fmt.Sprintf("inspect %v/%d/%d; %v", st.State.Held, st.State.FencingToken, st.State.HoldCount, st.Err)
}

// TestRunStepsAnswersAsSingleCalls runs one script of mixed operations, several on each key
// (duplicate acquires, re-entries, releases with stale tokens, renewals, inspections, keys
// without rows), as one batch on one store and as single calls in order on another: every
// step must get exactly its single call's answer, and both stores must end alike.
func TestRunStepsAnswersAsSingleCalls(t *testing.T) {
	t.Parallel()
	script := []scriptOp{
		acq("a", "A"), acq("a", "A"), acq("a", "B"), ren("a", "A", 0), ren("a", "B", time.Minute),
		rel("a", "A", 2), rel("a", "B", 0), rel("a", "A", 1), insp("a"), rel("a", "A", 1), acq("a", "B"),
		rel("a", "A", 0), ren("a", "B", 30*time.Second), insp("a"),
		rel("free", "A", 0), ren("free", "A", time.Minute), insp("free"), insp("never"),
		acq("b", "B"), rel("b", "B", 1), acq("b", "A"), acq("b", "B"), rel("b", "A", 2), acq("b", "B"), acq("b", "B"),
		acq("c", "C"), insp("c"), rel("c", "C", 0), rel("c", "C", 0),
	}
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		batched, alone := e.newStore(t).open(t, Config{ReclaimInterval: Off}), e.newStore(t).open(t, Config{ReclaimInterval: Off})
		steps := make([]*lock.Step, len(script))
		for i, o := range script {
			steps[i] = o.step()
		}
		batched.RunSteps(ctx, steps)
		for i, o := range script {
			single := o.step()
			alone.runStep(ctx, single)
			if got, want := answer(steps[i]), answer(single); got != want {
				t.Errorf("step %d (%d on %q by %q): batched %q, alone %q", i, o.kind, o.key, o.owner, got, want)
			}
		}
		for _, key := range []string{"a", "b", "c", "free", "never"} {
			got, want := must(batched.Inspect(ctx, key)), must(alone.Inspect(ctx, key))
			if got.Held != want.Held || got.FencingToken != want.FencingToken || got.HoldCount != want.HoldCount {
				t.Errorf("%q after the script: batched %+v, alone %+v", key, got, want)
			}
		}
		// One lease's holder id is kept through its re-entries and renewals.
		if id := steps[0].Attempt.Lease.HolderID; id == "" || steps[1].Attempt.Lease.HolderID != id || steps[3].Lease.HolderID != id {
			t.Errorf("holder ids of one lease: acquire %q, re-entry %q, renewal %q", id, steps[1].Attempt.Lease.HolderID, steps[3].Lease.HolderID)
		}
	})
}

// must is v, panicking on err: for calls whose failure the test does not expect.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestRunStepsChunkBoundary runs a batch over more keys than one transaction takes
// (stepChunk), with a rival holding the key at the chunk boundary and a second step on the
// boundary keys: each key gets its own answer whichever chunk it falls in.
func TestRunStepsChunkBoundary(t *testing.T) {
	t.Parallel()
	forEngine(t, func(t *testing.T, e engine) {
		if testenv.Race && e.name == "sqlite" {
			t.Skip("over 500 keys take seconds on SQLite under the race detector (see testenv.Race); the chunking is every engine's same code")
		}
		ctx := context.Background()
		b := e.newStore(t).open(t, Config{ReclaimInterval: Off})
		keys := make([]string, stepChunk+20)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%04d", i)
		}
		rival := keys[stepChunk-1] // the last key of the first chunk
		held := must(b.TryAcquire(ctx, rival, "rival", time.Minute))
		next := must(b.TryAcquire(ctx, keys[stepChunk], "rival", time.Minute)) // the first of the second
		if _, _, err := b.Release(ctx, keys[stepChunk], "rival", 0); err != nil {
			t.Fatal(err)
		}
		var steps []*lock.Step
		for _, k := range keys {
			steps = append(steps, acq(k, "batch").step())
		}
		steps = append(steps, acq(rival, "batch").step(), rel(keys[stepChunk], "batch", 0).step())
		b.RunSteps(ctx, steps)
		for i, st := range steps[:len(keys)] {
			switch {
			case st.Err != nil:
				t.Errorf("acquire of %q: %v", st.Key, st.Err)
			case i == stepChunk-1:
				if st.Attempt.Acquired || st.Attempt.Holder.FencingToken != held.Lease.FencingToken {
					t.Errorf("acquire of the rival's %q: %+v, want refused with token %d", st.Key, st.Attempt, held.Lease.FencingToken)
				}
			case !st.Attempt.Acquired:
				t.Errorf("acquire of free %q refused: %+v", st.Key, st.Attempt)
			case i == stepChunk && st.Attempt.Lease.FencingToken != next.Lease.FencingToken+1:
				t.Errorf("acquire of %q: token %d, want %d after the rival's", st.Key, st.Attempt.Lease.FencingToken, next.Lease.FencingToken+1)
			}
		}
		if again := steps[len(keys)]; again.Attempt.Acquired || again.Err != nil {
			t.Errorf("second acquire of the rival's key: %+v %v", again.Attempt, again.Err)
		}
		if r := steps[len(keys)+1]; r.Err != nil || r.Remaining != 0 || r.Released.FencingToken != next.Lease.FencingToken+1 {
			t.Errorf("release after acquire in the second chunk: %d %+v %v", r.Remaining, r.Released, r.Err)
		}
		if st := must(b.Inspect(ctx, rival)); st.FencingToken != held.Lease.FencingToken || st.HoldCount != 1 {
			t.Errorf("the rival's lock after the batch: %+v", st)
		}
	})
}

// TestRunStepsRacesSingleCalls races batches of acquires on many keys against rivals
// acquiring some of the same keys with single calls, round after round (every winner
// releasing between rounds, in one batch): each key has exactly one winner per round, and its tokens rise
// strictly from round to round.
func TestRunStepsRacesSingleCalls(t *testing.T) {
	t.Parallel()
	const (
		rivals = 3
		stride = 20 // each rival tries every stride-th key
		rounds = 2
	)
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		keys := 1000
		if testenv.Race && e.name == "sqlite" {
			keys = 100 // testenv.Race: SQLite runs its writers one at a time anyway
		}
		s := e.newStore(t)
		batcher := s.open(t, Config{ReclaimInterval: Off})
		single := batcher
		if e.name != "sqlite" { // a second instance; two on one SQLite file only take turns on its file lock
			single = s.open(t, Config{ReclaimInterval: Off})
		}
		last := make(map[string]uint64)
		for round := range rounds {
			steps := make([]*lock.Step, keys)
			for i := range steps {
				steps[i] = acq(fmt.Sprintf("race%04d", i), "batch").step()
			}
			type win struct {
				owner string
				token uint64
			}
			var mu sync.Mutex
			wins := make(map[string][]win)
			var wg sync.WaitGroup
			for r := range rivals {
				wg.Go(func() {
					owner := fmt.Sprintf("rival%d", r)
					for i := r; i < keys; i += stride {
						key := fmt.Sprintf("race%04d", (i*7+round*13)%keys)
						att, err := single.TryAcquire(ctx, key, owner, time.Minute)
						if err != nil {
							t.Errorf("rival %s on %q: %v", owner, key, err)
							return
						}
						if att.Acquired {
							mu.Lock()
							wins[key] = append(wins[key], win{owner, att.Lease.FencingToken})
							mu.Unlock()
						}
					}
				})
			}
			batcher.RunSteps(ctx, steps)
			wg.Wait()
			for _, st := range steps {
				if st.Err != nil {
					t.Fatalf("batched acquire of %q: %v", st.Key, st.Err)
				}
				if st.Attempt.Acquired {
					wins[st.Key] = append(wins[st.Key], win{"batch", st.Attempt.Lease.FencingToken})
				}
			}
			releases := make([]*lock.Step, keys)
			for i := range keys {
				key := fmt.Sprintf("race%04d", i)
				w := wins[key]
				if len(w) != 1 {
					t.Fatalf("round %d: %q won by %v, want exactly one holder", round, key, w)
				}
				if w[0].token <= last[key] {
					t.Fatalf("round %d: %q token %d, not above the last round's %d", round, key, w[0].token, last[key])
				}
				last[key] = w[0].token
				releases[i] = rel(key, w[0].owner, w[0].token).step()
			}
			single.RunSteps(ctx, releases) // each winner's release, as one batch
			for _, st := range releases {
				if st.Err != nil || st.Remaining != 0 {
					t.Fatalf("release of %q by its winner %s: %d left, %v", st.Key, st.Owner, st.Remaining, st.Err)
				}
			}
		}
	})
}

// TestRunStepsExpiryBoundary decides batches on rows whose lease ends exactly at the clock
// (expires_at == now: run out) and a millisecond later (still held): the batch takes over,
// refuses and reports exactly as the single calls' decisions, at the boundary.
func TestRunStepsExpiryBoundary(t *testing.T) {
	t.Parallel()
	const now = 1_000_000
	lease := row{owner: "A", holder: "h", holds: 2, token: 7, ttlMs: 100, now: now}
	tests := []struct {
		name      string
		expiresAt int64
		want      []string
		ended     int
	}{
		{"run out at the clock", now, []string{
			"renew token 0 holds 0; lock: not held",
			"acquire true token 8 holds 1; holder false/0/0; <nil>",
			"acquire true token 8 holds 2; holder false/0/0; <nil>",
			"acquire false token 0 holds 0; holder true/8/2; <nil>",
			"release 1 token 8; <nil>",
		}, 1},
		{"held a millisecond more", now + 1, []string{
			"renew token 7 holds 2; <nil>",
			"acquire false token 0 holds 0; holder true/7/2; <nil>",
			"acquire false token 0 holds 0; holder true/7/2; <nil>",
			"acquire true token 7 holds 3; holder false/0/0; <nil>",
			"release 0 token 0; lock: held by another owner",
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lease
			r.expiresAt = tt.expiresAt
			ks := &keySteps{key: "k", steps: []*lock.Step{
				ren("k", "A", 0).step(), acq("k", "B").step(), acq("k", "B").step(), acq("k", "A").step(), rel("k", "B", 0).step(),
			}}
			c := chunkRun{start: time.Now()}
			c.decide(context.Background(), "test", ks, r, 0, false)
			for i, st := range ks.steps {
				if got := answer(st); got != tt.want[i] {
					t.Errorf("step %d: %q, want %q", i, got, tt.want[i])
				}
			}
			if len(c.ended) != tt.ended {
				t.Errorf("%d leases reported ended, want %d", len(c.ended), tt.ended)
			}
		})
	}
}

// TestRunStepsReportsTakeovers: a batch that takes over a lease that ran out reports it once,
// after commit, as a single attempt does.
func TestRunStepsReportsTakeovers(t *testing.T) {
	t.Parallel()
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		b := e.newStore(t).open(t, Config{ReclaimInterval: Off})
		var mu sync.Mutex
		var ended []lock.Expiry
		b.ReportExpiries(func(x lock.Expiry) { mu.Lock(); ended = append(ended, x); mu.Unlock() })
		old := must(b.TryAcquire(ctx, "k", "A", 20*time.Millisecond))
		for deadline := time.Now().Add(10 * time.Second); must(b.Inspect(ctx, "k")).Held; {
			if time.Now().After(deadline) {
				t.Fatal("a 20ms lease still held after 10s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		steps := []*lock.Step{ren("k", "A", 0).step(), acq("k", "B").step(), acq("k", "C").step(), acq("k", "B").step()}
		b.RunSteps(ctx, steps)
		if !errors.Is(steps[0].Err, lock.ErrNotHeld) || !steps[1].Attempt.Acquired || steps[2].Attempt.Acquired ||
			steps[3].Attempt.Lease.HoldCount != 2 || steps[1].Attempt.Lease.FencingToken != old.Lease.FencingToken+1 {
			t.Fatalf("batch after expiry: %q %q %q %q", answer(steps[0]), answer(steps[1]), answer(steps[2]), answer(steps[3]))
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ended) != 1 || ended[0].FencingToken != old.Lease.FencingToken || ended[0].HolderID != old.Lease.HolderID {
			t.Errorf("reported %+v, want the one lease that ran out (token %d)", ended, old.Lease.FencingToken)
		}
	})
}

// TestRunStepsBatchesRaceBatches runs batches on the same keys at once, from two instances,
// each listing the keys in another order and across a chunk boundary: every key has exactly
// one winner, and no batch fails (a deadlock between them would surface as an error once
// its retries ran out).
func TestRunStepsBatchesRaceBatches(t *testing.T) {
	t.Parallel()
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		keys := stepChunk + 40
		if testenv.Race && e.name == "sqlite" {
			keys = 64 // testenv.Race: SQLite runs its writers one at a time anyway
		}
		s := e.newStore(t)
		instances := []*Backend{s.open(t, Config{ReclaimInterval: Off}), s.open(t, Config{ReclaimInterval: Off})}
		if e.name == "sqlite" { // see TestRunStepsRacesSingleCalls
			instances[1] = instances[0]
		}
		const batches = 4
		all := make([][]*lock.Step, batches)
		var wg sync.WaitGroup
		for i := range batches {
			steps := make([]*lock.Step, keys)
			for j := range steps {
				k := j
				if i%2 == 1 {
					k = keys - 1 - j // the other order
				}
				steps[j] = acq(fmt.Sprintf("both%04d", k), fmt.Sprintf("batch%d", i)).step()
			}
			all[i] = steps
			wg.Go(func() { instances[i%2].RunSteps(ctx, steps) })
		}
		wg.Wait()
		winners := make(map[string]int)
		for _, steps := range all {
			for _, st := range steps {
				if st.Err != nil {
					t.Fatalf("acquire of %q by %s: %v", st.Key, st.Owner, st.Err)
				}
				if st.Attempt.Acquired {
					winners[st.Key]++
				}
			}
		}
		for j := range keys {
			if k := fmt.Sprintf("both%04d", j); winners[k] != 1 {
				t.Errorf("%q has %d winners, want 1", k, winners[k])
			}
		}
	})
}

// TestRunStepsConcurrentSizes runs batches of every padded size at once on a fresh backend, so
// some prepare their statements while others hold a connection in a chunk's transaction:
// on SQLite, whose pool has one connection, a preparer holding the statement cache's lock
// while it waited for that connection used to deadlock with the chunk that held it.
func TestRunStepsConcurrentSizes(t *testing.T) {
	t.Parallel()
	forEngine(t, func(t *testing.T, e engine) {
		b := e.newStore(t).open(t, Config{ReclaimInterval: Off})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for n := 1; n <= 64; n *= 2 {
					steps := make([]*lock.Step, n+g%3)
					for i := range steps {
						steps[i] = acq(fmt.Sprintf("size%d-%d-%d", g, n, i), "batch").step()
					}
					b.RunSteps(ctx, steps)
					for _, st := range steps {
						if st.Err != nil || !st.Attempt.Acquired {
							t.Errorf("acquire of %q: %+v %v", st.Key, st.Attempt, st.Err)
							return
						}
					}
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("batches of several sizes at once did not finish in 2 minutes: deadlocked")
		}
	})
}

// TestRunStepsThousandOnOneKey runs a batch of 1,000 random steps on one key by two owners
// (acquires past the hold limit, releases with right and wrong tokens, renewals, inspections),
// decided in one transaction, and the same script as single calls on another store: every
// step gets its single call's answer and the key ends alike.
func TestRunStepsThousandOnOneKey(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	script := make([]scriptOp, 1000)
	for i := range script {
		o := []string{"A", "B"}[r.IntN(2)]
		switch r.IntN(5) {
		case 0, 1:
			script[i] = acq("k", o)
		case 2:
			script[i] = rel("k", o, uint64(r.IntN(3)))
		case 3:
			script[i] = ren("k", o, time.Duration(r.IntN(2))*time.Minute)
		default:
			script[i] = insp("k")
		}
	}
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		batched, alone := e.newStore(t).open(t, Config{ReclaimInterval: Off}), e.newStore(t).open(t, Config{ReclaimInterval: Off})
		steps := make([]*lock.Step, len(script))
		for i, o := range script {
			steps[i] = o.step()
		}
		batched.RunSteps(ctx, steps)
		for i, o := range script {
			single := o.step()
			alone.runStep(ctx, single)
			if got, want := answer(steps[i]), answer(single); got != want {
				t.Fatalf("step %d (%d by %q): batched %q, alone %q", i, o.kind, o.owner, got, want)
			}
		}
		got, want := must(batched.Inspect(ctx, "k")), must(alone.Inspect(ctx, "k"))
		if got.Held != want.Held || got.FencingToken != want.FencingToken || got.HoldCount != want.HoldCount {
			t.Fatalf("after the script: batched %+v, alone %+v", got, want)
		}
	})
}
