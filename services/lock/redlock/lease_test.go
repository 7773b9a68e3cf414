package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestReleaseRenewOutcomes checks how Release and Renew read the nodes' answers: success on
// a majority of the owner's nodes, and otherwise the error the answers support.
func TestReleaseRenewOutcomes(t *testing.T) {
	t.Parallel()
	const me, x = "me", "owner-x"
	free := hold{}
	tests := []struct {
		name  string
		holds []hold
		down  []int
		// Release: remaining holds or error; and what it leaves.
		remaining  uint32
		releaseErr error
		after      []hold
		// Renew (on a fresh seed): token and count, or error.
		token, count uint32
		renewErr     error
	}{
		{
			name:      "held everywhere",
			holds:     []hold{{me, 7, 2}, {me, 7, 2}, {me, 7, 2}},
			remaining: 1, after: []hold{{me, 7, 1}, {me, 7, 1}, {me, 7, 1}},
			token: 7, count: 2,
		},
		{
			name:  "held on a majority, another owner on one",
			holds: []hold{{me, 7, 1}, {me, 7, 1}, {x, 8, 1}},
			after: []hold{free, free, {x, 8, 1}},
			token: 7, count: 1,
		},
		{
			// A count above the majority's may be a hold about to be reported acquired: the
			// node keeps it until its own count or ttl ends it; the majority is free.
			name:  "counts drifted: freed by the majority, a minority's higher count left to its ttl",
			holds: []hold{{me, 7, 1}, {me, 7, 2}, {me, 7, 1}},
			after: []hold{free, {me, 7, 1}, free},
			token: 7, count: 1,
		},
		{
			name:       "another owner on a majority",
			holds:      []hold{{me, 7, 1}, {x, 8, 1}, {x, 8, 1}},
			releaseErr: lock.ErrNotOwner, after: []hold{free, {x, 8, 1}, {x, 8, 1}},
			renewErr: lock.ErrNotOwner,
		},
		{
			name:       "held on a minority only",
			holds:      []hold{{me, 7, 1}, free, free},
			releaseErr: lock.ErrNotHeld, after: []hold{free, free, free},
			renewErr: lock.ErrNotHeld,
		},
		{
			name: "free", releaseErr: lock.ErrNotHeld, after: []hold{free, free, free}, renewErr: lock.ErrNotHeld,
		},
		{
			name:  "one node down, held on the others",
			holds: []hold{{me, 7, 1}, {me, 7, 1}, {me, 7, 1}}, down: []int{0},
			after: []hold{{me, 7, 1}, free, free},
			token: 7, count: 1,
		},
		{
			name:  "one node down, free on the others: the down node cannot make a majority",
			holds: []hold{{me, 7, 1}, free, free}, down: []int{0},
			releaseErr: lock.ErrNotHeld, after: []hold{{me, 7, 1}, free, free},
			renewErr: lock.ErrNotHeld,
		},
		{
			name:  "one node down, held on one other: the down node may make the majority",
			holds: []hold{{me, 7, 1}, {me, 7, 1}, free}, down: []int{0},
			releaseErr: lock.ErrUnavailable, after: []hold{{me, 7, 1}, free, free},
			renewErr: lock.ErrUnavailable,
		},
		{
			name:  "two nodes down",
			holds: []hold{{me, 7, 1}, {me, 7, 1}, {me, 7, 1}}, down: []int{0, 1},
			releaseErr: lock.ErrUnavailable, after: []hold{{me, 7, 1}, {me, 7, 1}, free},
			renewErr: lock.ErrUnavailable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()

			c := newCluster(t)
			b := c.open()
			c.seed("rel", tt.holds, nil)
			c.seed("ren", tt.holds, nil)
			c.down(tt.down...)

			remaining, _, err := b.Release(ctx, "rel", me, 0)
			if !errors.Is(err, tt.releaseErr) || err == nil && remaining != tt.remaining {
				t.Fatalf("Release = %d, %v; want %d, %v", remaining, err, tt.remaining, tt.releaseErr)
			}
			c.wantHolds("rel", tt.after)

			start := time.Now()
			l, err := b.Renew(ctx, "ren", me, time.Minute)
			if !errors.Is(err, tt.renewErr) {
				t.Fatalf("Renew error %v, want %v", err, tt.renewErr)
			}
			if err != nil {
				return
			}
			if uint32(l.FencingToken) != tt.token || l.HoldCount != tt.count {
				t.Fatalf("Renew = token %d count %d, want token %d count %d", l.FencingToken, l.HoldCount, tt.token, tt.count)
			}
			if l.ExpiresAt.Before(start.Add(50*time.Second)) || l.ExpiresAt.After(start.Add(time.Minute)) {
				t.Fatalf("Renew ExpiresAt %v after the call, want about the new minute", l.ExpiresAt.Sub(start))
			}
		})
	}
}

// TestInspectMajorityView checks that Inspect reports a holder only when a majority agree,
// and refuses to guess when the nodes that did not answer could change the answer.
func TestInspectMajorityView(t *testing.T) {
	t.Parallel()
	const x, y = "owner-x", "owner-y"
	free := hold{}
	tests := []struct {
		name    string
		holds   []hold
		down    []int
		held    bool
		holder  string
		token   uint64
		wantErr error
	}{
		{name: "held by a majority", holds: []hold{{x, 4, 2}, {x, 4, 2}, free}, held: true, holder: x, token: 4},
		{name: "held on a minority", holds: []hold{{x, 4, 1}, free, free}},
		{name: "two owners, one node each", holds: []hold{{x, 4, 1}, {y, 5, 1}, free}},
		{name: "free with one node down", down: []int{2}},
		{name: "held by a majority with one node down", holds: []hold{{x, 4, 1}, {x, 4, 1}, {x, 4, 1}}, down: []int{2}, held: true, holder: x, token: 4},
		{name: "one holder and one node down: cannot tell", holds: []hold{{x, 4, 1}, free, free}, down: []int{2}, wantErr: lock.ErrUnavailable},
		{name: "two nodes down", holds: []hold{{x, 4, 1}, {x, 4, 1}, {x, 4, 1}}, down: []int{1, 2}, wantErr: lock.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			b := c.open()
			c.seed("k", tt.holds, nil)
			c.down(tt.down...)
			st, err := b.Inspect(context.Background(), "k")
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Inspect error %v, want %v", err, tt.wantErr)
			}
			if st.Held != tt.held || tt.held && (st.HolderID != seededHolder(tt.token) || st.FencingToken != tt.token) {
				t.Fatalf("Inspect = %+v, want held %v by %s with token %d", st, tt.held, tt.holder, tt.token)
			}
			if st.Held && time.Until(st.ExpiresAt) <= 0 {
				t.Fatalf("Inspect ExpiresAt %v is not in the future", st.ExpiresAt)
			}
		})
	}
}
