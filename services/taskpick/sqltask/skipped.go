package sqltask

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/coordkit/coordkit/services/taskpick"
)

// cand is a task a pick read, with its place in every pick order.
type cand struct {
	seq, runAt, rnd, neg int64
	task                 taskpick.LeasedTask
	token                uint64
}

// scanCand reads a row of pickCols.
func scanCand(row interface{ Scan(...any) error }, more ...any) (cand, error) {
	var c cand
	err := row.Scan(append([]any{&c.seq, &c.task.ID, &c.task.Payload, &c.neg, &c.token, &c.task.Attempt, &c.task.MaxAttempts, &c.runAt, &c.rnd}, more...)...)
	c.task.Priority = int32(-c.neg)
	return c, err
}

// pickOrder compares candidates in the pick order o; r is a Random pick's starting position.
func pickOrder(o taskpick.Order, r int64) func(a, b cand) int {
	switch o {
	case taskpick.Priority:
		return func(a, b cand) int {
			return cmp.Or(cmp.Compare(a.neg, b.neg), cmp.Compare(a.runAt, b.runAt), cmp.Compare(a.seq, b.seq))
		}
	case taskpick.Random: // from r on, then from the start
		rank := func(c cand) int {
			if c.rnd >= r {
				return 0
			}
			return 1
		}
		return func(a, b cand) int {
			return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.rnd, b.rnd), cmp.Compare(a.seq, b.seq))
		}
	}
	return func(a, b cand) int { return cmp.Or(cmp.Compare(a.runAt, b.runAt), cmp.Compare(a.seq, b.seq)) }
}

// errSkipped ends a pick's first transaction when its read skipped due tasks: the pick runs
// again, taking those first (takeSkipped).
var errSkipped = errors.New("sqltask: pick skipped locked tasks")

// missed reads, without locks, which of the first n due tasks of pool in pick order the
// pick's reads skipped: those not in found.
//
// SKIP LOCKED skips a row whoever holds it, and a picker is not the only holder: on InnoDB
// a locking range read also locks the first index entry past its range, with its row, until
// it commits, and that entry is the next pool's first task when the read reaches the end of
// its own pool (a pick of an empty pool always does). Skipping it would answer that pool's
// pick empty, or short, while its task is ready, and a waiting pick woken for the task would
// sleep again.
func (b *Backend) missed(ctx context.Context, tx *sql.Tx, sts pickStmts, pool string, o taskpick.Order, now, r int64, n int, found []cand) ([]any, error) {
	have := make(map[int64]bool, len(found))
	for _, c := range found {
		have[c.seq] = true
	}
	var missed []any
	for _, st := range sts.peek {
		args := []any{pool, now}
		if o == taskpick.Random {
			args = append(args, r)
		}
		rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, append(args, n)...)
		if err != nil {
			return nil, err
		}
		for rows.Next() && len(missed) < n {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return nil, err
			}
			if !have[seq] {
				missed = append(missed, seq)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return missed, nil
}

// takeSkipped starts a pick's second transaction, before it holds any lock: it locks the
// first n due tasks of pool in pick order by primary key, which touches no other row, waiting
// for their holders, and returns those still available under the lock, in pick order; one a
// rival picker held comes back leased, and is left out. Waiting while holding no lock, and on
// rows in primary key order only, it closes no cycle with first transactions, which skip
// locked rows instead of waiting.
func (b *Backend) takeSkipped(ctx context.Context, tx *sql.Tx, sts pickStmts, pool string, o taskpick.Order, now, r int64, n int) ([]cand, error) {
	missed, err := b.missed(ctx, tx, sts, pool, o, now, r, n, nil)
	if err != nil || len(missed) == 0 {
		return nil, err
	}
	for len(missed) < n {
		missed = append(missed, int64(0)) // no row has seq 0
	}
	rows, err := tx.StmtContext(ctx, sts.lockSeqs).QueryContext(ctx, missed...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []cand
	for rows.Next() {
		var rowPool string
		var state int
		c, err := scanCand(rows, &rowPool, &state)
		if err != nil {
			return nil, err
		}
		if rowPool == pool && state == stAvailable && c.runAt <= now {
			out = append(out, c)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, pickOrder(o, r))
	return out, nil
}
