package sqltask

import (
	"cmp"
	"context"
	"database/sql"
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

// takeSkipped locks the due tasks of pool that the pick's reads skipped, waiting for their
// holders, and returns those still available, in pick order.
//
// SKIP LOCKED skips a row whoever holds it, and a picker is not the only holder: on InnoDB
// a locking range read also locks the first index entry past its range, with its row, until
// it commits, and that entry is the next pool's first task when the read reaches the end of
// its own pool (a pick of an empty pool always does). Skipping it would answer that pool's
// pick empty, or short, while its task is ready, and a waiting pick woken for the task would
// sleep again. So a pick that found fewer than n reads which due tasks it missed, without
// locks, then locks those rows by primary key, which touches no other row, and checks them
// again under the lock: one a rival picker held comes back leased, and is left out.
func (b *Backend) takeSkipped(ctx context.Context, tx *sql.Tx, sts pickStmts, pool string, o taskpick.Order, now, r int64, n int, found []cand) ([]cand, error) {
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
	if len(missed) == 0 {
		return nil, nil
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
