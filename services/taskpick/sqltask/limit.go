package sqltask

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Limits on Pick. A pool's max_leased is enforced in the pick's transaction: it counts the
// pool's live leases (leased rows whose run_at, the lease's end, is after now) and leases at
// most max_leased minus them. Picks of one limited pool count and lease one at a time: where
// the engine has row locks, the transaction first locks the pool's settings row FOR UPDATE
// (limitLock), so a pick counts only after every pick before it committed; SQLite's write
// transactions are serial anyway. Picks of pools without a limit take no such lock: on
// MySQL the pick learns of the limit in its first read (nowPaused) and runs again as a
// limited pick (errLimited); on PostgreSQL its one statement leases nothing of a limited pool
// and says so (pickStatement), and pickLimited runs.

// errLimited ends a pick's transaction that found its pool limited before it locked the
// pool's row: the pick runs again, locking it first.
var errLimited = errors.New("sqltask: pick of a limited pool")

// lockLimit locks pool's settings row in tx and reads the clock, the paused flag and the
// limit; a pool without a row has neither.
func (b *Backend) lockLimit(ctx context.Context, tx *sql.Tx, pool string) (now int64, paused bool, limit int64, err error) {
	var p int
	err = tx.StmtContext(ctx, b.st.limitLock).QueryRowContext(ctx, pool).Scan(&now, &p, &limit)
	if errors.Is(err, sql.ErrNoRows) {
		err = tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now)
		return now, false, 0, err
	}
	return now, p != 0, limit, err
}

// placesLeft is how many of want tasks a pick at now may lease in a pool limited to limit
// (more than 0): limit minus the pool's live leases, read in tx. When none is left, next is
// the earliest end of a live lease, when a place frees at the latest.
func (b *Backend) placesLeft(ctx context.Context, tx *sql.Tx, pool string, limit, now int64, want int) (n int, next time.Time, err error) {
	var live int64
	var end sql.NullInt64
	if err := tx.StmtContext(ctx, b.st.liveLeases).QueryRowContext(ctx, pool, now).Scan(&live, &end); err != nil {
		return 0, time.Time{}, err
	}
	left := limit - live
	if left <= 0 {
		if end.Valid {
			next = fromMillis(end.Int64)
		}
		return 0, next, nil
	}
	return int(min(int64(want), left)), time.Time{}, nil
}
