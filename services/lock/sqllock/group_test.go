package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestGroupOneFailsAlone runs one group of transactions in which some fail (their decision
// or a missing row) and checks that each failure is rolled back alone, inside its savepoint,
// while the others commit.
func TestGroupOneFailsAlone(t *testing.T) {
	t.Parallel()
	b := sqliteStore(t).open(t, Config{ReclaimInterval: Off})
	if b.group == nil {
		t.Fatal("SQLite backend without group commit")
	}
	ctx := context.Background()
	if _, err := b.TryAcquire(ctx, "held", "owner-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	take := func(owner string) func(*sql.Tx, row) (*row, error) {
		return func(_ *sql.Tx, r row) (*row, error) {
			if r.held() && r.owner != owner {
				return nil, lock.ErrNotOwner
			}
			return &row{owner: owner, holder: "h", holds: 1, token: r.token + 1, expiresAt: r.now + 60_000, ttlMs: 60_000}, nil
		}
	}
	breakAfterWrite := func(_ *sql.Tx, r row) (*row, error) {
		return nil, errors.New("decided against it")
	}
	jobs := []txJob{
		{key: "new-1", m: missingInsert, fn: take("owner-b")},
		{key: "held", m: missingFree, fn: take("owner-c")}, // ErrNotOwner
		{key: "new-2", m: missingInsert, fn: breakAfterWrite},
		{key: "absent", m: missingFails, fn: take("owner-d")}, // errNoRow
		{key: "new-3", m: missingInsert, fn: take("owner-e")},
	}
	res, err := b.runGroup(ctx, jobs)
	if err != nil {
		t.Fatalf("group failed as a whole: %v", err)
	}
	wantErr := []error{nil, lock.ErrNotOwner, nil, errNoRow, nil}
	for i, r := range res {
		switch {
		case i == 2 && r.Err == nil:
			t.Errorf("job 2 = nil, want its own error")
		case i != 2 && !errors.Is(r.Err, wantErr[i]) && !(wantErr[i] == nil && r.Err == nil):
			t.Errorf("job %d (%s) = %v, want %v", i, jobs[i].key, r.Err, wantErr[i])
		}
	}
	for key, owner := range map[string]string{"new-1": "owner-b", "held": "owner-a", "new-3": "owner-e"} {
		r, found, err := b.peek(ctx, key)
		if err != nil || !found || r.owner != owner {
			t.Errorf("%s after the group: %+v found=%v err=%v, want held by %s", key, r, found, err, owner)
		}
	}
	for _, key := range []string{"new-2", "absent"} {
		if _, found, err := b.peek(ctx, key); err != nil || found {
			t.Errorf("%s after its rolled-back job: found=%v err=%v, want no row", key, found, err)
		}
	}
}

// TestGroupCommitUnderConcurrency drives one SQLite backend from many goroutines at once,
// so that transactions queue into groups: owners acquire, re-enter and release keys of their
// own while rivals try them all the while. Every answer must be the one a transaction of its
// own would give: no rival ever gets a held key, hold counts are exact, tokens rise.
func TestGroupCommitUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := sqliteStore(t).open(t, Config{ReclaimInterval: Off})
	ctx := context.Background()
	const owners, rounds = 16, 20
	var mu sync.Mutex
	holders := map[string]string{} // who the test saw acquire each key and not yet release it
	var wg sync.WaitGroup
	errs := make(chan error, owners*rounds*4)
	for o := range owners {
		key, owner := fmt.Sprintf("key-%d", o%4), fmt.Sprintf("owner-%02d-0123456789", o)
		wg.Go(func() {
			var last uint64
			for range rounds {
				att, err := b.TryAcquire(ctx, key, owner, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if !att.Acquired {
					continue // a rival (another owner of the same key) holds it
				}
				mu.Lock()
				if h := holders[key]; h != "" {
					errs <- fmt.Errorf("%s acquired %s while %s holds it", owner, key, h)
				}
				holders[key] = owner
				mu.Unlock()
				if att.Lease.FencingToken <= last || att.Lease.HoldCount != 1 {
					errs <- fmt.Errorf("%s: lease %+v after token %d", owner, att.Lease, last)
				}
				last = att.Lease.FencingToken
				re, err := b.TryAcquire(ctx, key, owner, time.Minute)
				if err != nil || !re.Acquired || re.Lease.HoldCount != 2 {
					errs <- fmt.Errorf("%s: re-entry %+v, %v", owner, re, err)
				}
				for want := uint32(1); ; want-- {
					if want == 0 {
						mu.Lock()
						delete(holders, key)
						mu.Unlock()
					}
					left, _, err := b.Release(ctx, key, owner, last)
					if err != nil || left != want {
						errs <- fmt.Errorf("%s: release left %d, %v; want %d", owner, left, err, want)
						break
					}
					if want == 0 {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestGroupedCASFaultOnOneKeyFailsItAlone: a fault confined to one key's row (a trigger that
// aborts every UPDATE of "bad") fails that key's compare-and-set; operations on other keys
// that share its group must not fail with it, as they would not alone, and every answer
// must agree with what was stored (a success applied, an error not).
func TestGroupedCASFaultOnOneKeyFailsItAlone(t *testing.T) {
	t.Parallel()
	b := sqliteStore(t).open(t, Config{ReclaimInterval: Off})
	ctx := context.Background()
	const owners = 12
	owner := func(i int) string { return fmt.Sprintf("owner-%02d-0123456789", i) }
	for i := range owners {
		if att, err := b.TryAcquire(ctx, fmt.Sprint("good-", i), owner(i), time.Minute); err != nil || !att.Acquired {
			t.Fatalf("acquire: %+v %v", att, err)
		}
	}
	if att, err := b.TryAcquire(ctx, "bad", owner(99), time.Minute); err != nil || !att.Acquired {
		t.Fatalf("acquire bad: %+v %v", att, err)
	}
	if _, err := b.db.ExecContext(ctx, `CREATE TRIGGER fail_bad BEFORE UPDATE ON coordkit_lock_leases
		WHEN OLD.lock_key = 'bad' BEGIN SELECT RAISE(ABORT, 'injected fault on key bad'); END`); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var badWG sync.WaitGroup
	for range 4 {
		badWG.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				b.Renew(ctx, "bad", owner(99), time.Minute) //nolint:errcheck // fails by design
			}
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, owners)
	for i := range owners {
		key := fmt.Sprint("good-", i)
		wg.Go(func() {
			for round := range 20 {
				ttl := time.Duration(61_000+i*100+round) * time.Millisecond
				_, err := b.Renew(ctx, key, owner(i), ttl)
				r, _, perr := b.peekOne(ctx, key)
				switch {
				case perr != nil:
					errs <- perr
				case err != nil:
					errs <- fmt.Errorf("renewal of %s failed with the fault of another key: %w (stored ttl %d)", key, err, r.ttlMs)
				case r.ttlMs != ttl.Milliseconds():
					errs <- fmt.Errorf("%s: renewal succeeded, stored ttl %d, want %d", key, r.ttlMs, ttl.Milliseconds())
				default:
					continue
				}
				return
			}
		})
	}
	wg.Wait()
	close(stop)
	badWG.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, err := b.Renew(ctx, "bad", owner(99), time.Minute); !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("renewal of the faulty key: %v, want unavailable", err)
	}
}
