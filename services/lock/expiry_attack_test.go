package lock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestAttackExpiryReportedOnce attacks "exactly once" at the engine: three engine instances
// (as three service processes would have) with eight goroutines each hammer leases around
// their end with EndExpired, takeovers (TryAcquire, and fair ones where the engine queues)
// and the holder's own renewals and releases. Every lease that ran out unreleased must be
// reported exactly once across all instances, and a released one never.
func TestAttackExpiryReportedOnce(t *testing.T) {
	t.Parallel()
	for _, bc := range backends {
		if !reportsExpiries(bc) {
			continue
		}
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			open := bc.store(t)
			var mu sync.Mutex
			reports := map[string]int{} // key/token -> reports
			var engines []lock.ExpiryReporter
			for range 3 {
				r := open(t).(lock.ExpiryReporter)
				r.ReportExpiries(func(e lock.Expiry) {
					mu.Lock()
					defer mu.Unlock()
					reports[fmt.Sprintf("%s/%d", e.Key, e.FencingToken)]++
				})
				engines = append(engines, r)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const keys, rounds = 6, 4
			ttl := 300 * time.Millisecond
			var expiredMu sync.Mutex
			released, ranOut := map[string]bool{}, map[string]bool{}
			for round := range rounds {
				var wg sync.WaitGroup
				for k := range keys {
					key := fmt.Sprintf("attack/%d", k)
					holder := fmt.Sprintf("holder-%d-%d", round, k)
					att, err := engines[k%3].TryAcquire(ctx, key, holder, ttl)
					if err != nil || !att.Acquired {
						t.Fatalf("TryAcquire(%s) = %+v, %v", key, att, err)
					}
					id := fmt.Sprintf("%s/%d", key, att.Lease.FencingToken)
					release := k%2 == 0 // half are released right at their end, racing the reporters
					wg.Go(func() {
						time.Sleep(time.Until(att.Lease.ExpiresAt) - 5*time.Millisecond)
						if release {
							_, _, err := engines[(k+1)%3].Release(ctx, key, holder, att.Lease.FencingToken)
							expiredMu.Lock()
							if err == nil {
								released[id] = true
							} else {
								ranOut[id] = true
							}
							expiredMu.Unlock()
						} else {
							expiredMu.Lock()
							ranOut[id] = true
							expiredMu.Unlock()
						}
					})
					for _, e := range engines {
						for g := range 8 {
							wg.Go(func() {
								time.Sleep(time.Until(att.Lease.ExpiresAt) + time.Duration(rand.N(20)-8)*time.Millisecond)
								switch g % 4 {
								case 0, 1:
									_, _ = e.EndExpired(ctx, key)
								case 2:
									rival := fmt.Sprintf("rival-%d-%d-%d", round, k, g)
									if a, err := e.TryAcquire(ctx, key, rival, time.Minute); err == nil && a.Acquired {
										_, _, _ = e.Release(ctx, key, rival, a.Lease.FencingToken)
									}
								case 3:
									_, _ = e.Renew(ctx, key, holder, ttl)
								}
							})
						}
					}
				}
				wg.Wait()
				// Whatever is still held (a renewal won, a rival holds) ends here; then the
				// next round starts on a free key.
				for k := range keys {
					key := fmt.Sprintf("attack/%d", k)
					for {
						st, err := engines[0].EndExpired(ctx, key)
						noErr(t, err)
						if !st.Held {
							break
						}
						time.Sleep(time.Until(st.ExpiresAt) + 10*time.Millisecond)
					}
				}
			}
			time.Sleep(200 * time.Millisecond) // ZooKeeper's own timers report in the background
			mu.Lock()
			defer mu.Unlock()
			for id, n := range reports {
				if n != 1 {
					t.Errorf("%s reported %d times, want once", id, n)
				}
				if released[id] {
					t.Errorf("%s was released, yet reported as expired", id)
				}
			}
			for id := range ranOut {
				if reports[id] != 1 {
					t.Errorf("%s ran out unreleased, reported %d times, want once", id, reports[id])
				}
			}
			t.Logf("%d expiries reported, %d leases released at their end", len(reports), len(released))
		})
	}
}
