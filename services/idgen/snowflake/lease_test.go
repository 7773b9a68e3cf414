package snowflake_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// crashStore passes calls to a store until crashed is set; then every call fails, as it
// would for a holder that was killed or cut off from the store.
type crashStore struct {
	workerid.Store
	crashed atomic.Bool
}

func (s *crashStore) Acquire(ctx context.Context, owner string, ttl time.Duration) (workerid.Lease, error) {
	if s.crashed.Load() {
		return workerid.Lease{}, workerid.ErrUnavailable
	}
	return s.Store.Acquire(ctx, owner, ttl)
}

func (s *crashStore) Renew(ctx context.Context, id int, owner string, ttl time.Duration, last int64) error {
	if s.crashed.Load() {
		return workerid.ErrUnavailable
	}
	return s.Store.Renew(ctx, id, owner, ttl, last)
}

func (s *crashStore) Release(ctx context.Context, id int, owner string, last int64) error {
	if s.crashed.Load() {
		return workerid.ErrUnavailable
	}
	return s.Store.Release(ctx, id, owner, last)
}

func sqliteLeases(t *testing.T) workerid.Store {
	t.Helper()
	db, err := sqldb.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "ids.db"))
	noErr(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := workerid.NewSQL(context.Background(), db)
	noErr(t, err)
	return store
}

// A holder that never renews still issues until its lease ends, so the lease record must
// bound its IDs from the start: the next holder of the id, with a clock a little behind,
// waits past them instead of issuing them again.
func TestLeaseRecordsBoundBeforeFirstRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := sqliteLeases(t)
	const ttl = 300 * time.Millisecond
	crashing := &crashStore{Store: store}
	prev := start(t, snowflake.Config{Store: crashing, LeaseTTL: ttl})
	crashing.crashed.Store(true) // no renewal or release from now on
	var last int64
	for {
		ids, err := prev.Next(ctx, 100)
		if err != nil {
			break // the lease ran out
		}
		last = ids[len(ids)-1]
	}
	time.Sleep(50 * time.Millisecond) // the store's expiry is a little later than the holder's

	behind := func() time.Time { return time.Now().Add(-time.Second) }
	g := start(t, snowflake.Config{Store: store, Clock: behind})
	if id, _ := g.Worker(); id != 0 {
		t.Fatalf("new holder leased worker id %d, want the expired 0", id)
	}
	ids, err := g.Next(ctx, 1)
	noErr(t, err)
	if ids[0] <= last {
		t.Fatalf("new holder's first ID %d is not above %d, issued by the crashed holder of the same worker id", ids[0], last)
	}
}

// Re-leasing after a lost lease may give a lower worker id; the next ID must still be above
// the last one, even within the same millisecond.
func TestReleaseKeepsIDsIncreasing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, steal := leaseStores[2].store(t) // sqlite: an isolated store
	frozenAt := time.Now()
	var frozen atomic.Bool
	frozen.Store(true)
	clock := func() time.Time {
		if frozen.Load() {
			return frozenAt
		}
		return time.Now()
	}
	low := start(t, snowflake.Config{Store: store, Clock: clock})
	g := start(t, snowflake.Config{Store: store, Clock: clock})
	if id, _ := g.Worker(); id != 1 {
		t.Fatalf("second generator leased worker id %d, want 1", id)
	}
	before, err := g.Next(ctx, 5)
	noErr(t, err)
	noErr(t, low.Close()) // frees worker id 0
	steal(t, 1)
	if err := g.Renew(ctx); err == nil {
		t.Fatal("Renew of a stolen lease succeeded")
	}
	noErr(t, g.Renew(ctx)) // leases worker id 0
	if id, ok := g.Worker(); !ok || id != 0 {
		t.Fatalf("re-leased worker id %d (held %v), want 0", id, ok)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		frozen.Store(false)
	}()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	after, err := g.Next(ctx, 1)
	noErr(t, err)
	if after[0] <= before[len(before)-1] {
		t.Fatalf("ID %d after re-leasing worker id 0 is not above %d issued with worker id 1", after[0], before[len(before)-1])
	}
}
