package zklock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestHoldLimit: a re-entry at lock.MaxHoldCount fails with lock.ErrHoldLimit and leaves the
// lease exactly as it was (same node, version and data), through the instance holding the
// node and through another one (which would otherwise take the lease over); the count never
// wraps to 0.
func TestHoldLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	tests := []struct {
		name string
		// other re-enters through a second instance.
		other bool
	}{
		{name: "same instance"},
		{name: "another instance", other: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "limit-" + tt.name
			a := openTest(t, root)
			via := a
			if tt.other {
				via = openTest(t, root)
			}
			held := mustAcquire(t, a, key, "o", 0)
			// One hold short of the limit, written straight into the node.
			e := readLine(t, a, key)[0]
			d := e.data
			d.Holds = lock.MaxHoldCount - 1
			if _, err := a.conn.Set(e.path, d.encode(), e.stat.Version); err != nil {
				t.Fatal(err)
			}

			att, err := via.TryAcquire(ctx, key, "o", 30*time.Second)
			if err != nil || !att.Acquired || att.Lease.HoldCount != lock.MaxHoldCount || att.Lease.FencingToken != held.Lease.FencingToken {
				t.Fatalf("re-entry to the limit = (%+v, %v), want acquired with %d holds", att, err, uint32(lock.MaxHoldCount))
			}
			before := readLine(t, a, key)
			for _, b := range []*Backend{via, a} {
				att, err = b.TryAcquire(ctx, key, "o", time.Minute)
				if !errors.Is(err, lock.ErrHoldLimit) || att.Acquired {
					t.Fatalf("re-entry past the limit = (%+v, %v), want lock.ErrHoldLimit", att, err)
				}
			}
			after := readLine(t, a, key)
			if len(after) != 1 || after[0].path != before[0].path || after[0].stat.Version != before[0].stat.Version || after[0].data != before[0].data {
				t.Fatalf("lease after the refused re-entry = %v, want unchanged %v", describe(after), describe(before))
			}
			if left, _, err := via.Release(ctx, key, "o", 0); err != nil || left != lock.MaxHoldCount-1 {
				t.Fatalf("release = (%d, %v), want (%d, nil)", left, err, uint32(lock.MaxHoldCount-1))
			}
		})
	}
}

// TestRenewOwnTTL: Renew with ttl 0 renews for the lease's own ttl (the one the acquire,
// re-entry or renew that last set a ttl asked for), not for what a release left of it, on
// the instance holding the node and through another one.
func TestRenewOwnTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	tests := []struct {
		name string
		// prepare leaves owner "o" holding key (one hold) with own ttl want.
		prepare func(t *testing.T, b *Backend, key string)
		other   bool
		want    time.Duration
	}{
		{
			name: "after a release of one of two holds",
			prepare: func(t *testing.T, b *Backend, key string) {
				for range 2 {
					if att, err := b.TryAcquire(ctx, key, "o", 3*time.Second); err != nil || !att.Acquired {
						t.Fatalf("acquire: (%+v, %v)", att, err)
					}
				}
				time.Sleep(time.Second) // what is left of the lease is now well below 3s
				if left, _, err := b.Release(ctx, key, "o", 0); err != nil || left != 1 {
					t.Fatalf("release = (%d, %v), want (1, nil)", left, err)
				}
			},
			want: 3 * time.Second,
		},
		{
			name: "through another instance after a release",
			prepare: func(t *testing.T, b *Backend, key string) {
				for range 2 {
					if att, err := b.TryAcquire(ctx, key, "o", 3*time.Second); err != nil || !att.Acquired {
						t.Fatalf("acquire: (%+v, %v)", att, err)
					}
				}
				time.Sleep(time.Second)
				if left, _, err := b.Release(ctx, key, "o", 0); err != nil || left != 1 {
					t.Fatalf("release = (%d, %v), want (1, nil)", left, err)
				}
			},
			other: true,
			want:  3 * time.Second,
		},
		{
			name: "after a renew with a ttl",
			prepare: func(t *testing.T, b *Backend, key string) {
				if att, err := b.TryAcquire(ctx, key, "o", 3*time.Second); err != nil || !att.Acquired {
					t.Fatalf("acquire: (%+v, %v)", att, err)
				}
				if _, err := b.Renew(ctx, key, "o", 5*time.Second); err != nil {
					t.Fatal(err)
				}
			},
			want: 5 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "own-ttl-" + tt.name
			// Sessions longer than every ttl here, so the ttl alone bounds ExpiresAt.
			a := openSession(t, root, 20*time.Second)
			via := a
			if tt.other {
				via = openSession(t, root, 20*time.Second)
			}
			tt.prepare(t, a, key)
			before := time.Now()
			l, err := via.Renew(ctx, key, "o", 0)
			after := time.Now()
			if err != nil {
				t.Fatalf("renew without a ttl: %v", err)
			}
			if l.ExpiresAt.Before(before.Add(tt.want)) || l.ExpiresAt.After(after.Add(tt.want)) {
				t.Fatalf("renew without a ttl expires %v after the call, want the lease's own ttl %v (call took %v)",
					l.ExpiresAt.Sub(before), tt.want, after.Sub(before))
			}
			e := readLine(t, a, key)[0]
			if got := time.Duration(e.data.TTLms) * time.Millisecond; got != tt.want || e.leaseTTL() != tt.want {
				t.Fatalf("node after the renew: ttl %v, own ttl %v; want both %v", got, e.leaseTTL(), tt.want)
			}
		})
	}
}
