package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestReentryWithSilentNodeIsNotANewLease: the owner holds a node that answers (A) and one
// that does not (B); the third (C) lost its hash. Re-entry sees one re-entered node and one
// free one, a majority together, but must not take the lock anew: that would issue a new
// token and reset the hold count under the owner's live outer hold. It answers unavailable
// and leaves the holds as they were.
func TestReentryWithSilentNodeIsNotANewLease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key, me = "re", "me"
	c.seed(key, []hold{{me, 7, 1}, {me, 7, 1}, {}}, []int64{7, 7, 6})
	b := c.open()
	c.down(1)

	_, err := b.TryAcquire(context.Background(), key, me, time.Second)
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("re-entry with the owner's second node silent = %v, want ErrUnavailable", err)
	}
	c.wantHolds(key, []hold{{me, 7, 1}, {me, 7, 1}, {}})
}
