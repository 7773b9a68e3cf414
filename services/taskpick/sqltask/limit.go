package sqltask

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/coordkit/coordkit/services/taskpick"
)

// Limits on Pick. A pool's max_leased and rate are enforced in the pick's transaction: it
// counts the pool's live leases (leased rows whose run_at, the lease's end, is after now) and
// refills the pool's token bucket (taskpick.Refill, on the database's clock), leases at most
// what both leave, and takes one token per task leased. Picks of one limited pool go one at a
// time: where the engine has row locks, the transaction first locks the pool's settings row
// FOR UPDATE (limitLock), so a pick counts only after every pick before it committed;
// SQLite's write transactions are serial anyway. Picks of pools without limits take no such
// lock: on MySQL the pick learns of a limit in its first read (nowPaused) and runs again as a
// limited pick (errLimited); on PostgreSQL its one statement leases nothing of a limited pool
// and says so (pickStatement), and pickLimited runs.

// limitedExpr is 1 when the pool row's settings limit picks (taskpick.PoolSettings.Limited),
// over the rows of poolTable of one pool (none: 0).
const limitedExpr = "COALESCE(MAX(CASE WHEN max_leased > 0 OR rate > 0 THEN 1 ELSE 0 END), 0)"

// errLimited ends a pick's transaction that found its pool limited before it locked the
// pool's row: the pick runs again, locking it first.
var errLimited = errors.New("sqltask: pick of a limited pool")

// poolLimits is a pool's row as a limited pick reads it.
type poolLimits struct {
	now       int64
	paused    bool
	maxLeased int64
	rate      float64
	burst     uint32
	tokens    float64
	lastMs    int64
}

// lockLimit locks pool's settings row in tx and reads the clock, the paused flag and the
// limits; a pool without a row has none.
func (b *Backend) lockLimit(ctx context.Context, tx *sql.Tx, pool string) (poolLimits, error) {
	var l poolLimits
	var p int
	err := tx.StmtContext(ctx, b.st.limitLock).QueryRowContext(ctx, pool).Scan(&l.now, &p, &l.maxLeased, &l.rate, &l.burst, &l.tokens, &l.lastMs)
	if errors.Is(err, sql.ErrNoRows) {
		err = tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&l.now)
		return poolLimits{now: l.now}, err
	}
	l.paused = p != 0
	return l, err
}

// placesLeft is how many of want tasks a pick may lease within the limits l, read in tx.
// When none is left, next is when the pick may find one: the earliest end of a live lease,
// or the next token.
func (b *Backend) placesLeft(ctx context.Context, tx *sql.Tx, pool string, l poolLimits, want int) (n int, next time.Time, err error) {
	if l.rate > 0 {
		have, wait := taskpick.Refill(l.rate, l.burst, l.tokens, l.lastMs, l.now)
		if have < 1 {
			return 0, fromMillis(l.now + wait), nil
		}
		want = int(min(float64(want), math.Floor(have)))
	}
	if l.maxLeased <= 0 {
		return want, time.Time{}, nil
	}
	var live int64
	var end sql.NullInt64
	if err := tx.StmtContext(ctx, b.st.liveLeases).QueryRowContext(ctx, pool, l.now).Scan(&live, &end); err != nil {
		return 0, time.Time{}, err
	}
	left := l.maxLeased - live
	if left <= 0 {
		if end.Valid {
			next = fromMillis(end.Int64)
		}
		return 0, next, nil
	}
	return int(min(int64(want), left)), time.Time{}, nil
}

// takeTokens takes a token per task a pick leased from the pool's bucket, in the pick's tx.
func (b *Backend) takeTokens(ctx context.Context, tx *sql.Tx, pool string, l poolLimits, taken int) error {
	if l.rate <= 0 {
		return nil
	}
	have, _ := taskpick.Refill(l.rate, l.burst, l.tokens, l.lastMs, l.now)
	_, err := tx.StmtContext(ctx, b.st.takeTokens).ExecContext(ctx, have-float64(taken), l.now, pool)
	return err
}
