package sqllock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// rawLease is a key's row as stored, with the database clock.
type rawLease struct {
	holds            uint32
	token            uint64
	expiresAt, ttlMs int64
	now              int64
}

func (s *store) lease(t *testing.T, b *Backend, key string) rawLease {
	t.Helper()
	var r rawLease
	err := s.raw.QueryRow("SELECT hold_count, fencing_token, expires_at, ttl_ms, "+b.d.NowMillis+
		" FROM "+leasesTable+" WHERE scope = ? AND lock_key = ?", s.scope, key).Scan(&r.holds, &r.token, &r.expiresAt, &r.ttlMs, &r.now)
	if err != nil {
		t.Fatalf("read row of %q: %v", key, err)
	}
	return r
}

// TestHoldLimit puts a lease at lock.MaxHoldCount holds straight into the table: one more
// re-entry must fail with ErrHoldLimit and leave the row exactly as it was (no wrap to 0, no
// extended expiry), and the holds must still release one by one.
func TestHoldLimit(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.newStore(t)
		b := s.open(t)
		if att, err := b.TryAcquire(ctx, "k", "o", time.Minute); err != nil || !att.Acquired {
			t.Fatalf("acquire: %+v, %v", att, err)
		}
		s.exec(t, "UPDATE "+leasesTable+" SET hold_count = ? WHERE scope = ? AND lock_key = ?", uint32(lock.MaxHoldCount), s.scope, "k")
		before := s.lease(t, b, "k")

		_, err := b.TryAcquire(ctx, "k", "o", 2*time.Minute)
		if !errors.Is(err, lock.ErrHoldLimit) {
			t.Fatalf("re-entry at MaxHoldCount: err %v, want lock.ErrHoldLimit", err)
		}
		after := s.lease(t, b, "k")
		if after.holds != before.holds || after.token != before.token || after.expiresAt != before.expiresAt || after.ttlMs != before.ttlMs {
			t.Fatalf("refused re-entry changed the row: before %+v, after %+v", before, after)
		}
		remaining, _, err := b.Release(ctx, "k", "o", 0)
		if err != nil || remaining != lock.MaxHoldCount-1 {
			t.Fatalf("release at the limit: %d, %v; want %d", remaining, err, uint32(lock.MaxHoldCount-1))
		}
		if att, err := b.TryAcquire(ctx, "k", "o", time.Minute); err != nil || att.Lease.HoldCount != lock.MaxHoldCount {
			t.Fatalf("re-entry below the limit: %+v, %v; want hold count %d", att, err, uint32(lock.MaxHoldCount))
		}
	})
}

// TestRenewOwnTTL checks that a Renew without a ttl extends the lease by the ttl that the
// acquire, re-entry or renew that last named one asked for, both in the expires_at it
// reports and in what the database keeps (so the lease really ends then, not 30s later).
func TestRenewOwnTTL(t *testing.T) {
	type step struct {
		op  string // acquire (also re-entry when held) or renew
		ttl time.Duration
	}
	cases := []struct {
		name  string
		steps []step
		want  time.Duration // the own ttl after the steps
	}{
		{name: "acquire", steps: []step{{"acquire", 7 * time.Second}}, want: 7 * time.Second},
		{name: "reentry", steps: []step{{"acquire", 7 * time.Second}, {"acquire", 3 * time.Second}}, want: 3 * time.Second},
		{name: "renew_with_ttl", steps: []step{{"acquire", 7 * time.Second}, {"renew", 90 * time.Second}}, want: 90 * time.Second},
		{name: "renew_without_keeps", steps: []step{{"acquire", 7 * time.Second}, {"renew", 0}, {"renew", 0}}, want: 7 * time.Second},
		{name: "fractional_ms_rounds_up", steps: []step{{"acquire", 1500*time.Millisecond + 300*time.Microsecond}}, want: 1501 * time.Millisecond},
	}
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.newStore(t)
		b := s.open(t)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				key := "own-ttl:" + tc.name
				for _, st := range tc.steps {
					var err error
					if st.op == "acquire" {
						var att lock.Attempt
						att, err = b.TryAcquire(ctx, key, "o", st.ttl)
						if err == nil && !att.Acquired {
							err = errors.New("not acquired")
						}
					} else {
						_, err = b.Renew(ctx, key, "o", st.ttl)
					}
					if err != nil {
						t.Fatalf("%s %v: %v", st.op, st.ttl, err)
					}
				}
				start := time.Now()
				lease, err := b.Renew(ctx, key, "o", 0)
				end := time.Now()
				if err != nil {
					t.Fatalf("renew without ttl: %v", err)
				}
				if lease.ExpiresAt.Before(start.Add(tc.want)) || lease.ExpiresAt.After(end.Add(tc.want)) {
					t.Errorf("renew without ttl reported expires_at %v after the call started, want %v",
						lease.ExpiresAt.Sub(start), tc.want)
				}
				// The database keeps now + 1 + ttl in whole ms; allow time for the read.
				r := s.lease(t, b, key)
				left := time.Duration(r.expiresAt-r.now) * time.Millisecond
				if left > tc.want+time.Millisecond || left < tc.want-2*time.Second {
					t.Errorf("row expires %v from now, want about %v", left, tc.want)
				}
			})
		}

		// And the lease really ends at its own ttl: a rival gets it soon after, not 30s later.
		const ttl = 300 * time.Millisecond
		if att, err := b.TryAcquire(ctx, "own-ttl:ends", "o", ttl); err != nil || !att.Acquired {
			t.Fatalf("acquire: %+v, %v", att, err)
		}
		lease, err := b.Renew(ctx, "own-ttl:ends", "o", 0)
		if err != nil {
			t.Fatalf("renew: %v", err)
		}
		time.Sleep(time.Until(lease.ExpiresAt) + 50*time.Millisecond)
		deadline := time.Now().Add(10 * time.Second)
		for {
			att, err := b.TryAcquire(ctx, "own-ttl:ends", "rival", ttl)
			if err != nil {
				t.Fatalf("rival: %v", err)
			}
			if att.Acquired {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease renewed without a ttl still held 10s after its own ttl: %+v", att.Holder)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
