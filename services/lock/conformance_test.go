package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// behaviours is the conformance suite: every backend in backends must pass every row.
var behaviours = []struct {
	name string
	run  func(t *testing.T, bc backendCase)
}{
	{"MutualExclusion", testMutualExclusion},
	{"Reentrancy", testReentrancy},
	{"WrongOwnerRefused", testWrongOwnerRefused},
	{"ExpiryFrees", testExpiryFrees},
	{"RenewExtends", testRenewExtends},
	{"FencingIncreases", testFencingIncreases},
	{"TryLockImmediate", testTryLockImmediate},
	{"WaitGetsReleasedLock", testWaitGetsReleasedLock},
	{"OddKeys", testOddKeys},
	{"DistinctKeysConcurrently", testDistinctKeysConcurrently},
	{"WatchdogKeepsLock", testWatchdogKeepsLock},
	{"LostWhenServiceUnreachable", testLostWhenServiceUnreachable},
	{"SameOwnerConcurrentReentry", testSameOwnerConcurrentReentry},
	{"TakeoverNotBeforeExpiry", testTakeoverNotBeforeExpiry},
	{"RenewKeepsOwnTTL", testRenewKeepsOwnTTL},
	{"ReleaseScopedToLease", testReleaseScopedToLease},
	{"Events", testEvents},
	{"ExpiredEvents", testExpiredEvents},
	{"NoLostWakeup", testNoLostWakeup},
	{"Watch", testWatch},
	{"HolderIDPerLease", testHolderIDPerLease},
	{"OwnerGuessUnconfirmable", testOwnerGuessUnconfirmable},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Cleanup(func() { // after every row: the batched transport must have sent batches
		if n := batchedTransport.batches.Load(); n == 0 && !t.Failed() && !testing.Short() {
			t.Error("the batched transport sent no Batch request: its rows ran as unary calls")
		} else {
			t.Logf("the batched transport sent %d Batch requests", n)
		}
	})
	// The rows run conformanceRows at a time, whatever -parallel says: they mostly wait on
	// leases, ttls and polling, and two at a time (-parallel's default on a 2-core CI host)
	// made this table alone most of a CI run. The pool is the table's own, so the package's
	// other timing-bound tests keep -parallel's default company.
	// Rows take their slots in table order, the longest behaviours first, so that the table
	// does not end with a few long rows running alone.
	type row struct {
		name string
		bc   backendCase
		run  func(t *testing.T, bc backendCase)
	}
	var long, short []row
	for _, bc := range backends {
		for _, tr := range transports {
			bc := bc // each transport's rows keep their own copy
			bc.unary = tr.unary
			for _, b := range behaviours {
				r := row{bc.name + "/" + tr.name + "/" + b.name, bc, b.run}
				if slices.Contains(longRows, b.name) {
					long = append(long, r)
				} else {
					short = append(short, r)
				}
			}
		}
	}
	slots := make(chan struct{}, conformanceRows)
	var rows sync.WaitGroup
	for _, r := range append(long, short...) {
		slots <- struct{}{}
		rows.Go(func() {
			defer func() { <-slots }()
			t.Run(r.name, func(t *testing.T) { r.run(t, r.bc) })
		})
	}
	rows.Wait()
}

// conformanceRows is how many rows of TestConformance run at once.
const conformanceRows = 4

// longRows are the behaviours whose rows take longest (watchdog renewals across a stall,
// expiries waited out): they start first.
var longRows = []string{"WatchdogKeepsLock", "LostWhenServiceUnreachable", "ExpiredEvents", "SameOwnerConcurrentReentry", "NoLostWakeup"}

func acquire(ctx context.Context, c *client.Client, key, owner string, ttl, wait time.Duration) (*lockv1.AcquireResponse, error) {
	return c.Locks().Acquire(ctx, &lockv1.AcquireRequest{
		Key: key, Owner: owner, Ttl: durationpb.New(ttl), Wait: durationpb.New(wait),
	})
}

func inspect(t *testing.T, c *client.Client, key string) *lockv1.LockState {
	t.Helper()
	return must(c.Locks().Inspect(context.Background(), &lockv1.InspectRequest{Key: key}))(t).GetState()
}

// testMutualExclusion: 64 goroutines over two service instances increment a counter kept in
// a file, non-atomically (read, pause, write), under the lock. Any overlap of two holders
// loses an increment. The file also keeps the last fencing token, which every holder checks
// is lower than its own, as a guarded store would.
func testMutualExclusion(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	path := filepath.Join(t.TempDir(), "counter")
	if err := os.WriteFile(path, []byte("0 0"), 0o644); err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 64, 4
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*3) // room for every error a broken lock could cause
	for w := range workers {
		c := a
		if w%2 == 1 {
			c = b
		}
		wg.Go(func() {
			for range rounds {
				l, err := c.Lock(ctx, "counter", client.WithTTL(10*time.Second))
				if err != nil {
					errs <- fmt.Errorf("lock: %w", err)
					return
				}
				raw, err := os.ReadFile(path)
				if err != nil {
					errs <- err
					return
				}
				var count int
				var last uint64
				fmt.Sscan(string(raw), &count, &last)
				if l.FencingToken() <= last {
					errs <- fmt.Errorf("fencing token %d not above last written %d", l.FencingToken(), last)
				}
				time.Sleep(time.Millisecond) // widen the window a second holder would fall into
				if err := os.WriteFile(path, fmt.Appendf(nil, "%d %d", count+1, l.FencingToken()), 0o644); err != nil {
					errs <- err
				}
				if err := l.Unlock(ctx); err != nil {
					errs <- fmt.Errorf("unlock: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	raw, _ := os.ReadFile(path)
	if got := strings.Fields(string(raw))[0]; got != strconv.Itoa(workers*rounds) {
		t.Fatalf("counter = %s, want %d: two holders overlapped", got, workers*rounds)
	}
}

func testReentrancy(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	first := must(acquire(ctx, a, "re", "", 5*time.Second, 0))(t)
	owner := first.GetLease().GetOwner()
	if !first.GetAcquired() || owner == "" || first.GetLease().GetHoldCount() != 1 {
		t.Fatalf("first acquire = %v, want acquired with a generated owner and hold count 1", first)
	}
	// The same owner re-enters through the other instance.
	second := must(acquire(ctx, b, "re", owner, 5*time.Second, 0))(t)
	if !second.GetAcquired() || second.GetLease().GetHoldCount() != 2 {
		t.Fatalf("re-entry = %v, want acquired with hold count 2", second)
	}
	if second.GetLease().GetFencingToken() != first.GetLease().GetFencingToken() {
		t.Fatalf("re-entry token %d, want the same token %d", second.GetLease().GetFencingToken(), first.GetLease().GetFencingToken())
	}
	if st := inspect(t, b, "re"); st.GetHoldCount() != 2 || !st.GetHeld() {
		t.Fatalf("inspect = %v, want held with hold count 2", st)
	}
	rel := must(a.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "re", Owner: owner}))(t)
	if !rel.GetReleased() || rel.GetHoldCount() != 1 {
		t.Fatalf("first release = %v, want released with 1 hold left", rel)
	}
	if other := must(acquire(ctx, b, "re", "", time.Second, 0))(t); other.GetAcquired() {
		t.Fatal("another owner acquired while one hold was left")
	}
	rel = must(b.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "re", Owner: owner}))(t)
	if rel.GetHoldCount() != 0 {
		t.Fatalf("last release = %v, want 0 holds left", rel)
	}
	if st := inspect(t, a, "re"); st.GetHeld() {
		t.Fatalf("inspect after last release = %v, want free", st)
	}
	_, err := a.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "re", Owner: owner})
	wantCode(t, err, connect.CodeFailedPrecondition)
}

func testWrongOwnerRefused(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	res := must(acquire(ctx, a, "wo", "real-owner-secret-0123456789", 5*time.Second, 0))(t)
	_, err := b.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "wo", Owner: "intruder-secret-0123456789"})
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = b.Locks().Renew(ctx, &lockv1.RenewRequest{Key: "wo", Owner: "intruder-secret-0123456789", Ttl: durationpb.New(time.Minute)})
	wantCode(t, err, connect.CodePermissionDenied)
	st := inspect(t, b, "wo")
	if !st.GetHeld() || st.GetFencingToken() != res.GetLease().GetFencingToken() || st.GetHoldCount() != 1 {
		t.Fatalf("after refused release/renew: %v, want still held by the real owner", st)
	}
	again := must(acquire(ctx, b, "wo", "real-owner-secret-0123456789", 5*time.Second, 0))(t)
	if st.GetHolderId() == "" || again.GetLease().GetHoldCount() != 2 {
		t.Fatalf("real owner re-entry = %v, want hold count 2", again)
	}
	// Nothing the intruder sees gives the owner away.
	if strings.Contains(st.String(), "real-owner-secret-0123456789") {
		t.Fatalf("inspect leaks the owner secret: %v", st)
	}
}

func testExpiryFrees(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	// The key is free: the wait only lets the service retry what a loaded machine makes
	// unavailable (Redlock gives a node a tenth of the ttl to answer).
	first := must(acquire(ctx, a, "exp", "", 300*time.Millisecond, 5*time.Second))(t)
	expires := first.GetLease().GetExpiresAt().AsTime()
	busy, err := acquire(ctx, b, "exp", "", time.Second, 0)
	if err == nil && busy.GetAcquired() && time.Now().Before(expires) {
		t.Fatal("acquired a lock whose lease is live")
	}
	time.Sleep(time.Until(expires) + 100*time.Millisecond)
	if st := inspect(t, b, "exp"); st.GetHeld() {
		t.Fatalf("inspect after ttl = %v, want free", st)
	}
	next := must(acquire(ctx, b, "exp", "", time.Second, 5*time.Second))(t)
	if !next.GetAcquired() || next.GetLease().GetFencingToken() <= first.GetLease().GetFencingToken() {
		t.Fatalf("acquire after expiry = %v, want acquired with a token above %d", next, first.GetLease().GetFencingToken())
	}
	_, err = a.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "exp", Owner: first.GetLease().GetOwner()})
	wantCode(t, err, connect.CodePermissionDenied)
}

func testRenewExtends(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	res := must(acquire(ctx, a, "renew", "", 2*time.Second, 0))(t)
	owner := res.GetLease().GetOwner()
	renewed := must(b.Locks().Renew(ctx, &lockv1.RenewRequest{Key: "renew", Owner: owner, Ttl: durationpb.New(6 * time.Second)}))(t)
	if !renewed.GetLease().GetExpiresAt().AsTime().After(res.GetLease().GetExpiresAt().AsTime()) {
		t.Fatalf("renewed expiry %v not after %v", renewed.GetLease().GetExpiresAt().AsTime(), res.GetLease().GetExpiresAt().AsTime())
	}
	if renewed.GetLease().GetFencingToken() != res.GetLease().GetFencingToken() {
		t.Fatal("renew changed the fencing token")
	}
	time.Sleep(time.Until(res.GetLease().GetExpiresAt().AsTime()) + 200*time.Millisecond) // past the original ttl
	if busy := must(acquire(ctx, b, "renew", "", time.Second, 0))(t); busy.GetAcquired() {
		t.Fatal("lock was free after renew extended it")
	}
	if st := inspect(t, a, "renew"); !st.GetHeld() {
		t.Fatal("inspect: not held after renew")
	}
	must(a.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "renew", Owner: owner}))(t)
	_, err := a.Locks().Renew(ctx, &lockv1.RenewRequest{Key: "renew", Owner: owner})
	wantCode(t, err, connect.CodeFailedPrecondition)
}

func testFencingIncreases(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	var last uint64
	for i := range 6 {
		c := []*client.Client{a, b}[i%2]
		// The key is free: the wait only lets a loaded host's Redlock node timeouts (a tenth
		// of the ttl) be retried rather than fail the row.
		l := must(c.Lock(ctx, "fence", client.WithTTL(time.Second), client.WithWait(10*time.Second)))(t)
		if l.FencingToken() <= last {
			t.Fatalf("holder %d got token %d, not above %d", i, l.FencingToken(), last)
		}
		last = l.FencingToken()
		// Re-entry keeps the token.
		// A try, not a wait: a retried re-entry whose first answer was lost would hold twice.
		// A 3s ttl gives Redlock's nodes 300ms each, enough on a loaded host.
		re := must(c.TryLock(ctx, "fence", client.WithOwner(l.Owner()), client.WithTTL(3*time.Second)))(t)
		if re.FencingToken() != last {
			t.Fatalf("re-entry token %d, want %d", re.FencingToken(), last)
		}
		noErr(t, re.Unlock(ctx))
		noErr(t, l.Unlock(ctx))
	}
	// An expired holder also gives way to a higher token.
	res := must(acquire(ctx, a, "fence", "", 200*time.Millisecond, 5*time.Second))(t)
	time.Sleep(300 * time.Millisecond)
	next := must(acquire(ctx, b, "fence", "", time.Second, 5*time.Second))(t)
	if res.GetLease().GetFencingToken() <= last || next.GetLease().GetFencingToken() <= res.GetLease().GetFencingToken() {
		t.Fatalf("tokens %d then %d after %d: not strictly increasing", res.GetLease().GetFencingToken(), next.GetLease().GetFencingToken(), last)
	}
}

func testTryLockImmediate(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	held := must(a.TryLock(ctx, "try", client.WithTTL(10*time.Second)))(t)
	defer held.Unlock(ctx)
	start := time.Now()
	res := must(acquire(ctx, b, "try", "", time.Second, 0))(t)
	if took := time.Since(start); took > 3*time.Second { // far below any wait, yet safe on a loaded host
		t.Fatalf("try-lock took %v, want an immediate answer", took)
	}
	if res.GetAcquired() || !res.GetHolder().GetHeld() || res.GetHolder().GetFencingToken() != held.FencingToken() {
		t.Fatalf("try-lock on a held lock = %v, want not acquired with the holder's state", res)
	}
	if _, err := b.TryLock(ctx, "try"); !errors.Is(err, client.ErrNotAcquired) {
		t.Fatalf("SDK TryLock error = %v, want ErrNotAcquired", err)
	}
}

func testWaitGetsReleasedLock(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	held := must(a.TryLock(ctx, "wait", client.WithTTL(10*time.Second)))(t)
	// A bounded wait on a lock that stays held gives up after the wait, without an error.
	start := time.Now()
	res := must(acquire(ctx, b, "wait", "", time.Second, 300*time.Millisecond))(t)
	if took := time.Since(start); res.GetAcquired() || took < 250*time.Millisecond {
		t.Fatalf("bounded wait = %v after %v, want not acquired after about 300ms", res, took)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		held.Unlock(ctx)
	}()
	l := must(b.Lock(ctx, "wait", client.WithWait(5*time.Second)))(t)
	if l.FencingToken() <= held.FencingToken() {
		t.Fatalf("waiter token %d not above %d", l.FencingToken(), held.FencingToken())
	}
	noErr(t, l.Unlock(ctx))
}

func testOddKeys(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	keys := []string{
		"order.42", "a b c", "a/b/c", "锁:订单:42", "emoji 🔒", "{brace}}", "*?[glob]",
		"tab\tand\nnewline", strings.Repeat("k", 512), strings.Repeat("锁", 170),
	}
	for _, key := range keys {
		l, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		if st := inspect(t, b, key); !st.GetHeld() || st.GetKey() != key {
			t.Fatalf("key %q: inspect = %v, want held", key, st)
		}
		if _, err := b.TryLock(ctx, key); !errors.Is(err, client.ErrNotAcquired) {
			t.Fatalf("key %q: second holder: %v, want ErrNotAcquired", key, err)
		}
		noErr(t, l.Unlock(ctx))
	}
	// Keys that differ only after a special character are different locks.
	x := must(a.TryLock(ctx, "p.q"))(t)
	y := must(b.TryLock(ctx, "p.q "))(t)
	noErr(t, x.Unlock(ctx))
	noErr(t, y.Unlock(ctx))
}

func testDistinctKeysConcurrently(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		c := []*client.Client{a, b}[i%2]
		wg.Go(func() {
			key := fmt.Sprintf("many:%d", i)
			// Free keys: acquired at once. The wait only lets the service retry what an
			// overloaded machine makes unavailable (a Redlock node's answer past its timeout).
			l, err := c.Lock(ctx, key, client.WithTTL(10*time.Second), client.WithWait(30*time.Second))
			if err != nil {
				errs <- fmt.Errorf("%s: %w", key, err)
				return
			}
			err = l.Unlock(ctx)
			// A burst of 200 cold Redlock connections can miss the per-node timeout on an
			// overloaded host: a release that failed as unavailable is safe to repeat.
			for try := 0; connect.CodeOf(err) == connect.CodeUnavailable && try < 5; try++ {
				_, err = c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.Owner()})
				if connect.CodeOf(err) == connect.CodeFailedPrecondition {
					err = nil // the failed release had gone through after all
				}
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %w", key, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
