//go:build redlock_attack

package redlock

import (
	"fmt"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestAttackCheckersCatchViolations: the storm checks find each violation they look for in a
// hand-made journal, and nothing in a clean one, so a passing storm means something.
func TestAttackCheckersCatchViolations(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	far := at(1e6)
	held := func(rival bool, from, to float64, token uint64, count uint32, relFrom, relTo float64, left uint32) *call {
		c := &call{rival: rival, acqStart: at(from), acqEnd: at(to), acquired: true, token: token, count: count, expires: far}
		if relFrom >= 0 {
			c.released, c.relStart, c.relEnd, c.relDone, c.left = true, at(relFrom), at(relTo), true, left
		}
		return c
	}
	expiring := func(c *call, ms float64) *call { c.expires = at(ms); return c }
	lost := func(c *call, err error) *call { c.relErr = fmt.Errorf("redlock: release: %w", err); return c }
	tests := []struct {
		name  string
		calls []*call
		check func(*journal) []string
		bad   bool
	}{
		{"rival inside a certain hold", []*call{held(false, 0, 1, 1, 1, 10, 11, 0), held(true, 2, 3, 2, 1, 4, 5, 0)}, checkExclusion, true},
		{"owner inside the rival's hold", []*call{held(true, 0, 1, 1, 1, 10, 11, 0), held(false, 2, 3, 2, 1, 4, 5, 0)}, checkExclusion, true},
		{"rival overlapping the release", []*call{held(false, 0, 1, 1, 1, 5, 6, 0), held(true, 4, 7, 2, 1, 8, 9, 0)}, checkExclusion, false},
		{"rival after the hold expired", []*call{expiring(held(false, 0, 1, 1, 1, -1, 0, 0), 3), held(true, 4, 5, 2, 1, 6, 7, 0)}, checkExclusion, false},
		{"calls overlap, holds overlap", []*call{held(false, 0, 5, 1, 1, 10, 11, 0), held(true, 1, 6, 2, 1, 7, 8, 0)}, checkExclusion, true},
		{"rival before the hold expired", []*call{expiring(held(false, 0, 1, 1, 1, -1, 0, 0), 3), held(true, 2, 2.5, 2, 1, 6, 7, 0)}, checkExclusion, true},
		{"release hears not held", []*call{lost(held(false, 0, 1, 1, 1, 2, 3, 0), lock.ErrNotHeld)}, checkLostHolds, true},
		{"release hears another owner", []*call{lost(held(false, 0, 1, 1, 1, 2, 3, 0), lock.ErrNotOwner)}, checkLostHolds, true},
		{"release after the validity hears not held", []*call{lost(expiring(held(false, 0, 1, 1, 1, 2, 3, 0), 2.5), lock.ErrNotHeld)}, checkLostHolds, false},
		{"release unavailable", []*call{lost(held(false, 0, 1, 1, 1, 2, 3, 0), lock.ErrUnavailable)}, checkLostHolds, false},
		{"new holder repeats a token", []*call{held(false, 0, 1, 5, 1, 2, 3, 0), held(true, 4, 5, 5, 1, 6, 7, 0)}, checkTokens, true},
		{"re-entry below an earlier token", []*call{held(true, 0, 1, 5, 1, 2, 3, 0), held(false, 4, 5, 4, 1, 6, 7, 0)}, checkTokens, true},
		{"tokens rise", []*call{held(false, 0, 1, 5, 1, 2, 3, 0), held(true, 4, 5, 6, 1, 6, 7, 0), held(false, 8, 9, 7, 1, 10, 11, 0)}, checkTokens, false},
		{"release frees under another hold", []*call{held(false, 0, 1, 1, 1, 10, 11, 0), held(false, 2, 3, 1, 2, 20, 21, 0)}, checkCounts, true},
		{"re-entry counts too few", []*call{held(false, 0, 1, 1, 1, 10, 11, 0), held(false, 2, 3, 1, 1, 5, 6, 0)}, checkCounts, true},
		{"nested holds counted", []*call{held(false, 0, 1, 1, 1, 10, 11, 0), held(false, 2, 3, 1, 2, 5, 6, 1)}, checkCounts, false},
	}
	for _, tt := range tests {
		got := tt.check(&journal{calls: tt.calls})
		if (len(got) > 0) != tt.bad {
			t.Errorf("%s: check found %q, want a problem: %v", tt.name, got, tt.bad)
		}
	}
}
