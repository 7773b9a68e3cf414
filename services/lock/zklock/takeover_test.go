package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestTakeover: a renewal or re-entry through an instance whose session does not own the
// lease's node moves the lease into that instance's session, keeping its token and its place
// in line, so the lease outlives the session of the instance that acquired it.
func TestTakeover(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// through renews or re-enters owner's lease on b.
		through   func(ctx context.Context, b *Backend, key, owner string) (lock.Lease, error)
		wantHolds uint32
	}{
		{
			name: "renew",
			through: func(ctx context.Context, b *Backend, key, owner string) (lock.Lease, error) {
				return b.Renew(ctx, key, owner, 30*time.Second)
			},
			wantHolds: 1,
		},
		{
			name: "re-entry",
			through: func(ctx context.Context, b *Backend, key, owner string) (lock.Lease, error) {
				att, err := b.TryAcquire(ctx, key, owner, 30*time.Second)
				if err == nil && !att.Acquired {
					err = fmt.Errorf("re-entry not acquired: %+v", att)
				}
				return att.Lease, err
			},
			wantHolds: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			root := testRoot(t)
			const key = "moving"
			a, b, waiter := openTest(t, root), openTest(t, root), openTest(t, root)
			held := mustAcquire(t, a, key, "o", 0)

			type result struct {
				att lock.Attempt
				err error
			}
			waited := make(chan result, 1)
			go func() {
				att, err := waiter.AcquireWait(ctx, key, "w", 30*time.Second, 20*time.Second)
				waited <- result{att, err}
			}()
			waitLine(t, a, key, 2)

			lease, err := tt.through(ctx, b, key, "o")
			if err != nil {
				t.Fatalf("through the other instance: %v", err)
			}
			if lease.FencingToken != held.Lease.FencingToken || lease.HoldCount != tt.wantHolds {
				t.Fatalf("through the other instance: token %d holds %d, want the lease's token %d and %d holds",
					lease.FencingToken, lease.HoldCount, held.Lease.FencingToken, tt.wantHolds)
			}
			line := readLine(t, b, key)
			if len(line) != 2 || line[0].data.Owner != "o" || line[1].data.Owner != "w" {
				t.Fatalf("line after the takeover = %v, want the lease, then the waiter", describe(line))
			}
			if line[0].stat.EphemeralOwner != b.conn.SessionID() {
				t.Fatalf("lease node belongs to session %x, want the renewing instance's %x", line[0].stat.EphemeralOwner, b.conn.SessionID())
			}

			// The acquiring instance goes away: its session, no longer the lease's, takes
			// nothing with it.
			a.Close()
			time.Sleep(300 * time.Millisecond) // let a wrongly woken waiter get through
			st, err := b.Inspect(ctx, key)
			if err != nil || !st.Held || st.FencingToken != held.Lease.FencingToken || st.HoldCount != tt.wantHolds {
				t.Fatalf("after the acquiring instance closed: (%+v, %v), want held with token %d", st, err, held.Lease.FencingToken)
			}
			select {
			case r := <-waited:
				t.Fatalf("waiter got (%+v, %v) while the lease was held", r.att, r.err)
			default:
			}

			for range tt.wantHolds {
				if _, _, err := b.Release(ctx, key, "o", 0); err != nil {
					t.Fatalf("release through the instance that holds the lease now: %v", err)
				}
			}
			select {
			case r := <-waited:
				if r.err != nil || !r.att.Acquired || r.att.Lease.FencingToken <= held.Lease.FencingToken {
					t.Fatalf("waiter after the release: (%+v, %v), want acquired with a token above %d", r.att, r.err, held.Lease.FencingToken)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("waiter did not get the lock within 5s of the release")
			}
		})
	}
}

// TestTakeoverReleased: a lease released (or ended with its session) before a renewal
// through another instance is not brought back: the renewal fails with lock.ErrNotHeld and
// leaves no node.
func TestTakeoverReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	tests := []struct {
		name string
		end  func(t *testing.T, a *Backend)
	}{
		{name: "released", end: func(t *testing.T, a *Backend) {
			if _, _, err := a.Release(ctx, "k-released", "o", 0); err != nil {
				t.Fatalf("release: %v", err)
			}
		}},
		{name: "session closed", end: func(t *testing.T, a *Backend) { a.CloseSession() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "k-" + tt.name
			a, b := openTest(t, root), openTest(t, root)
			mustAcquire(t, a, key, "o", 0)
			if _, err := b.Inspect(ctx, key); err != nil { // b has seen (and cached) the lease
				t.Fatal(err)
			}
			tt.end(t, a)
			if _, err := b.Renew(ctx, key, "o", time.Minute); !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("renew of a lease that ended: %v, want lock.ErrNotHeld", err)
			}
			if line := readLine(t, b, key); len(line) != 0 {
				t.Fatalf("line after the refused renew = %v, want empty", describe(line))
			}
		})
	}
}

// TestTakeoverConcurrent renews, re-enters and releases one owner's lease through three
// instances at once, so takeovers race each other, in-place writes and releases, while a
// rival keeps trying. The lease must never be lost, doubled or re-tokened: the rival never
// gets the lock, every answer carries the lease's token, and afterwards exactly one node with
// exactly the base hold is left.
func TestTakeoverConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	const key, owner = "contended", "o"
	insts := []*Backend{openTest(t, root), openTest(t, root), openTest(t, root)}
	rival := openTest(t, root)
	held := mustAcquire(t, insts[0], key, owner, 0)
	token := held.Lease.FencingToken

	var (
		wg    sync.WaitGroup
		stop  atomic.Bool
		moves atomic.Int64
	)
	check := func(what string, l lock.Lease, err error) bool {
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return false
		}
		if l.FencingToken != token {
			t.Errorf("%s: token %d, want the lease's %d", what, l.FencingToken, token)
		}
		return true
	}
	for i, b := range insts {
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; !stop.Load(); n++ {
					if g == 0 {
						l, err := b.Renew(ctx, key, owner, 30*time.Second)
						check(fmt.Sprintf("renew via %d", i), l, err)
						continue
					}
					att, err := b.TryAcquire(ctx, key, owner, 30*time.Second)
					if err == nil && !att.Acquired {
						t.Errorf("re-entry via %d not acquired: %+v", i, att)
						continue
					}
					if !check(fmt.Sprintf("re-entry via %d", i), att.Lease, err) {
						continue
					}
					// Release through the next instance, so releases meet foreign nodes too.
					if _, _, err := insts[(i+1)%len(insts)].Release(ctx, key, owner, 0); err != nil {
						t.Errorf("release via %d: %v", (i+1)%len(insts), err)
					}
				}
			}()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			att, err := rival.TryAcquire(ctx, key, "rival", time.Second)
			switch {
			case err != nil:
				t.Errorf("rival: %v", err)
			case att.Acquired:
				t.Errorf("rival acquired (token %d) while %s held the lock", att.Lease.FencingToken, owner)
			case att.Holder.FencingToken != token:
				t.Errorf("rival sees holder token %d, want %d", att.Holder.FencingToken, token)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// Count the lease's moves between sessions, to show the test raced takeovers at all.
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := ""
		for !stop.Load() {
			if line := readLine(t, rival, key); len(line) > 0 && line[0].path != last {
				moves.Add(1)
				last = line[0].path
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for deadline := time.Now().Add(20 * time.Second); moves.Load() < 100 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("the lease changed nodes %d times", moves.Load())
	if moves.Load() < 3 {
		t.Fatalf("the lease changed nodes %d times, want takeovers racing (at least 3)", moves.Load())
	}

	line := readLine(t, rival, key)
	if len(line) != 1 || line[0].data.Holds != 1 || line[0].token() != token {
		t.Fatalf("line after the race = %v, want one node of %s with 1 hold and token %d", describe(line), owner, token)
	}
	if left, _, err := insts[2].Release(ctx, key, owner, 0); err != nil || left != 0 {
		t.Fatalf("last release = (%d, %v), want (0, nil)", left, err)
	}
	att, err := rival.TryAcquire(ctx, key, "rival", time.Second)
	if err != nil || !att.Acquired || att.Lease.FencingToken <= token {
		t.Fatalf("rival after the release: (%+v, %v), want acquired with a token above %d", att, err, token)
	}
}

// TestCarried: an attempt whose own node a concurrent re-entry took over before the attempt
// could give it back finds its hold in the replacement (by the node it started from), and
// writes its own ttl into this session; a lease started by another node is not its.
func TestCarried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	const key = "carried"
	a, b := openTest(t, root), openTest(t, root)
	held := mustAcquire(t, a, key, "o", 0)
	origin := readLine(t, a, key)[0].origin()
	if _, err := b.Renew(ctx, key, "o", 30*time.Second); err != nil { // takes the node over
		t.Fatal(err)
	}
	parent := a.parentPath(key)
	if _, err := a.carried(ctx, key, parent, "lock-0000000000000000-0000000000", "o", time.Minute); !errors.Is(err, errMoved) {
		t.Fatalf("carried for a node that did not start the lease: %v, want errMoved", err)
	}
	att, err := a.carried(ctx, key, parent, origin, "o", 3*time.Second)
	if err != nil || !att.Acquired || att.Lease.FencingToken != held.Lease.FencingToken || att.Lease.HoldCount != 1 {
		t.Fatalf("carried = (%+v, %v), want the lease (token %d, 1 hold)", att, err, held.Lease.FencingToken)
	}
	line := readLine(t, a, key)
	if len(line) != 1 || line[0].stat.EphemeralOwner != a.conn.SessionID() || line[0].data.LeaseMs != 3000 {
		t.Fatalf("line = %v, want one node of a's session with the attempt's 3s ttl", describe(line))
	}
}

// TestSameOwnerExact has one owner acquire and release a free lock through three instances
// at once, with renewals moving the lease between sessions meanwhile: try-locks race each
// other for the front of an empty line, and re-entries take over nodes other attempts are
// still checking. Every acquire must count exactly one hold and every release drop one:
// no release finds the lease gone while its acquire's hold is outstanding, and once all
// holds are released the lock is free and the line empty.
func TestSameOwnerExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	const key, owner = "same-owner", "o"
	insts := []*Backend{openTest(t, root), openTest(t, root), openTest(t, root)}
	var (
		wg       sync.WaitGroup
		stop     atomic.Bool
		acquired atomic.Int64
	)
	for i, b := range insts {
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if g == 2 {
						// Moves the lease into this session while others use it.
						if _, err := b.Renew(ctx, key, owner, 10*time.Second); err != nil && !errors.Is(err, lock.ErrNotHeld) {
							t.Errorf("renew via %d: %v", i, err)
						}
						continue
					}
					att, err := b.TryAcquire(ctx, key, owner, 10*time.Second)
					if err != nil {
						t.Errorf("acquire via %d: %v", i, err)
						continue
					}
					if !att.Acquired {
						continue
					}
					acquired.Add(1)
					// A release that keeps losing reads to the churn answers unavailable
					// having changed nothing; a client retries it, and so does this one.
					via := (i + g + 1) % len(insts)
					_, _, err = insts[via].Release(ctx, key, owner, 0)
					for try := 0; errors.Is(err, lock.ErrUnavailable) && try < 20; try++ {
						_, _, err = insts[via].Release(ctx, key, owner, 0)
					}
					if err != nil {
						t.Errorf("release of an outstanding hold via %d: %v", via, err)
					}
				}
			}()
		}
	}
	// Enough acquires to race, however loaded the machine is.
	for deadline := time.Now().Add(20 * time.Second); acquired.Load() < 250 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d acquires", acquired.Load())
	if acquired.Load() < 50 {
		t.Fatalf("only %d acquires, want enough to race", acquired.Load())
	}
	if st, err := insts[0].Inspect(ctx, key); err != nil || st.Held {
		t.Fatalf("after every hold was released: (%+v, %v), want free", st, err)
	}
	if line := readLine(t, insts[0], key); len(line) != 0 {
		t.Fatalf("line after every hold was released = %v, want empty", describe(line))
	}
}
