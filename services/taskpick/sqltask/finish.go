package sqltask

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/coordkit/coordkit/services/taskpick"
)

// storedToken is how a presented token is compared with the token column: as itself when a
// lease can have it, else as 0, which no task has (every token is above PutToken's). SQLite's
// integers are signed 64-bit, so its driver refuses to bind a token of 2^63 or more; no lease
// ever has one (tokens stay below 2^53), so the statement then simply matches nothing and the
// call answers as for any other wrong token.
func storedToken(token uint64) uint64 {
	if token > math.MaxInt64 {
		return 0
	}
	return token
}

// Ack implements taskpick.Backend: one DELETE (or UPDATE to done) whose WHERE checks the
// lease.
func (b *Backend) Ack(ctx context.Context, pool, id string, lease taskpick.Lease) error {
	return b.leaseWrite(ctx, pool, id, lease, false, func() (sql.Result, error) {
		return b.st.ack.ExecContext(ctx, pool, id, storedToken(lease.Token), lease.Digest)
	})
}

// Extend implements taskpick.Backend.
func (b *Backend) Extend(ctx context.Context, pool, id string, lease taskpick.Lease, ttl time.Duration) error {
	return b.leaseWrite(ctx, pool, id, lease, true, func() (sql.Result, error) {
		return b.st.extend.ExecContext(ctx, ceilMillis(ttl), pool, id, storedToken(lease.Token), lease.Digest)
	})
}

// Nack implements taskpick.Backend: one UPDATE whose WHERE checks the lease, then a read of
// what it made of the task.
func (b *Backend) Nack(ctx context.Context, pool, id string, lease taskpick.Lease, retryAfter time.Duration, reason string) (bool, error) {
	if retryAfter == taskpick.PoolPolicy {
		// The lease fixes the attempt: the UPDATE below changes the task only under the
		// lease this read saw, or not at all.
		d, err := b.policyDelay(ctx, pool, id)
		if err != nil {
			return false, err
		}
		retryAfter = d
	}
	err := b.leaseWrite(ctx, pool, id, lease, false, func() (sql.Result, error) {
		return b.st.nack.ExecContext(ctx, b.errorText(reason), randomPosition(), ceilMillis(retryAfter), pool, id, storedToken(lease.Token), lease.Digest)
	})
	if err != nil {
		return false, err
	}
	l, err := b.lookup(ctx, pool, id)
	if errors.Is(err, taskpick.ErrNotFound) {
		return false, nil // the Nack made it available, and it was picked and acked since
	}
	if err != nil {
		return false, err
	}
	return l.state == stDead, nil
}

// leaseWrite runs a statement guarded by leaseCheck, again when InnoDB chose it as a
// deadlock victim (racing finishes of one lease do that). When it changed nothing it reads
// the task to tell a missing task from a stale lease. MySQL counts changed rows, not matched
// ones, so a statement that may leave the row as it was (unchangedOK: an Extend to the end
// the lease already had) succeeded when the lease is still the caller's.
func (b *Backend) leaseWrite(ctx context.Context, pool, id string, lease taskpick.Lease, unchangedOK bool, exec func() (sql.Result, error)) error {
	var res sql.Result
	err := b.d.Retry(ctx, func() (err error) {
		res, err = exec()
		return err
	})
	if err != nil {
		return b.fail(ctx, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return b.fail(ctx, err)
	}
	if n == 1 {
		return nil
	}
	l, err := b.lookup(ctx, pool, id)
	if err != nil {
		return err
	}
	if unchangedOK && l.state == stLeased && l.token == lease.Token && l.digest == lease.Digest && l.digest != "" && l.runAt > l.now {
		return nil
	}
	return taskpick.ErrStaleLease
}

// looked is a task's lease as read by lookup.
type looked struct {
	state      int
	token      uint64
	digest     string
	runAt, now int64
}

func (b *Backend) lookup(ctx context.Context, pool, id string) (looked, error) {
	var l looked
	err := b.st.lookup.QueryRowContext(ctx, pool, id).Scan(&l.state, &l.token, &l.digest, &l.runAt, &l.now)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return l, taskpick.ErrNotFound
	case err != nil:
		return l, b.fail(ctx, err)
	}
	return l, nil
}
