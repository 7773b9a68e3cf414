package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock/sqllock"
)

// TestMySQLRestart restarts a private MariaDB under two service instances while workers
// take turns on one lock: during the outage calls fail with unavailable, after it they work
// again, and at no moment do two workers hold the lock.
func TestMySQLRestart(t *testing.T) {
	t.Parallel()
	db := testenv.StartMariaDB(t)
	ctx := context.Background()
	var clients [2]*instance
	for i := range clients {
		b, err := sqllock.OpenMySQL(ctx, db.DSN(), sqllock.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		clients[i] = startInstance(t, "mysql", b)
	}

	const ttl = 2 * time.Second
	var (
		inside, overlaps       atomic.Int32
		before, after, outages atomic.Int32
		restarted              atomic.Bool
		otherErrs              = make(chan error, 64)
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		c := clients[w%2].client
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := acquire(ctx, c, "stock", "", ttl, 200*time.Millisecond)
				if err == nil && res.GetAcquired() {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(2 * time.Millisecond)
					inside.Add(-1)
					if restarted.Load() {
						after.Add(1)
					} else {
						before.Add(1)
					}
					_, err = c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "stock", Owner: res.GetLease().GetOwner()})
				}
				switch {
				case err == nil:
				case connect.CodeOf(err) == connect.CodeUnavailable:
					outages.Add(1)
					time.Sleep(50 * time.Millisecond)
				default:
					select {
					case otherErrs <- err:
					default:
					}
				}
			}
		})
	}

	time.Sleep(time.Second)
	db.Stop()
	// While the database is down every call answers unavailable, fast.
	start := time.Now()
	_, err := acquire(ctx, clients[0].client, "probe", "", ttl, 0)
	wantCode(t, err, connect.CodeUnavailable)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("acquire during the outage took %v, want a fast unavailable", took)
	}
	time.Sleep(500 * time.Millisecond)
	db.Start()
	restarted.Store(true)
	// Locks whose release was lost in the outage expire within ttl; then work resumes.
	deadline := time.Now().Add(3 * ttl)
	for after.Load() < 20 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(otherErrs)
	for err := range otherErrs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("unexpected error (only unavailable is expected around a restart): %v", err)
		}
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d times two workers held the lock at once", overlaps.Load())
	}
	if before.Load() == 0 || after.Load() < 20 || outages.Load() == 0 {
		t.Fatalf("critical sections before %d, after %d, unavailable answers %d: want work on both sides of an outage",
			before.Load(), after.Load(), outages.Load())
	}
}
