package sqltask

import (
	"context"
	"database/sql"
	"strconv"
	"time"

	"github.com/coordkit/coordkit/services/taskpick"
)

// orderBy is the ORDER BY of each pick order, matching an index that starts (pool, state).
func orderBy(o taskpick.Order) string {
	switch o {
	case taskpick.Priority:
		return " ORDER BY neg_priority, run_at, seq"
	case taskpick.Random:
		return " ORDER BY rnd"
	}
	return " ORDER BY run_at, seq"
}

// candidates is the SELECT of up to n due tasks of a pool in order o, with the clock's
// reading as the parameter "?now" stands for. For ORDER_RANDOM it is the tasks from a random
// position on (rnd >= ?), then from the start (rnd < ?), so every due task can be drawn.
func candidates(cols string, o taskpick.Order, lock string) []string {
	base := "SELECT " + cols + " FROM " + table + " WHERE pool = ? AND state = " + strconv.Itoa(stAvailable) + " AND run_at <= ?"
	if o == taskpick.Random {
		return []string{
			base + " AND rnd >= ?" + orderBy(o) + " LIMIT ?" + lock,
			base + " AND rnd < ?" + orderBy(o) + " LIMIT ?" + lock,
		}
	}
	return []string{base + orderBy(o) + " LIMIT ?" + lock}
}

// leaseSet is the SET of a pick: leased by a new token until now + 1 + ttl, one attempt more.
// Parameters: lease end, now × TokenScale twice.
const leaseSet = " SET state = 2, attempt = attempt + 1, run_at = ?, token = CASE WHEN token + 1 > ? THEN token + 1 ELSE ? END"

// Pick implements taskpick.Backend.
func (b *Backend) Pick(ctx context.Context, pool string, n int, ttl time.Duration, order taskpick.Order) (taskpick.Picked, error) {
	var out taskpick.Picked
	var now int64
	// Statements are prepared before the transaction: preparing takes a connection of its
	// own, and SQLite's pool has one, which the transaction holds.
	sts, err := b.pickStatements(ctx, n, order)
	if err != nil {
		return taskpick.Picked{}, b.fail(ctx, err)
	}
	err = b.tx(ctx, func(tx *sql.Tx) (err error) {
		if err := tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now); err != nil {
			return err
		}
		if b.d.SkipLocked == "" {
			out.Tasks, err = b.pickReturning(ctx, tx, sts[0], pool, n, now, ceilMillis(ttl), order)
		} else {
			out.Tasks, err = b.pickSkipLocked(ctx, tx, sts, pool, n, now, ceilMillis(ttl), order)
		}
		return err
	})
	if err != nil {
		return taskpick.Picked{}, b.fail(ctx, err)
	}
	if len(out.Tasks) < n {
		var due sql.NullInt64
		if err := b.st.nextDue.QueryRowContext(ctx, pool, now).Scan(&due); err != nil {
			return taskpick.Picked{}, b.fail(ctx, err)
		}
		if due.Valid {
			out.NextDue = fromMillis(due.Int64)
		}
	}
	return out, nil
}

// pickStatements prepares (once, then from the cache) what a pick of n in order runs: on
// SQLite the one UPDATE … RETURNING; on InnoDB the candidate SELECTs, then an UPDATE of n rows
// by seq (unused places hold 0, which no row has).
func (b *Backend) pickStatements(ctx context.Context, n int, order taskpick.Order) ([]*sql.Stmt, error) {
	var qs []string
	if b.d.SkipLocked == "" {
		sel := candidates("seq", order, "")
		in := sel[0]
		if order == taskpick.Random {
			in = "SELECT seq FROM (" + sel[0] + ") UNION ALL SELECT seq FROM (" + sel[1] + ") LIMIT ?"
		}
		qs = []string{"UPDATE " + table + leaseSet + " WHERE seq IN (" + in + ") RETURNING id, payload, neg_priority, token, attempt, max_attempts"}
	} else {
		qs = append(candidates("seq, id, payload, neg_priority, token, attempt, max_attempts", order, b.d.SkipLocked),
			"UPDATE "+table+leaseSet+" WHERE seq IN ("+placeholders(n)+")")
	}
	sts := make([]*sql.Stmt, len(qs))
	for i, q := range qs {
		st, err := b.stmtN(ctx, q)
		if err != nil {
			return nil, err
		}
		sts[i] = st
	}
	return sts, nil
}

// pickReturning leases up to n tasks with one UPDATE … RETURNING: on SQLite the transaction
// holds the whole database, so no other picker can interleave. The tasks come in no
// particular order.
func (b *Backend) pickReturning(ctx context.Context, tx *sql.Tx, st *sql.Stmt, pool string, n int, now, ttlMs int64, order taskpick.Order) ([]taskpick.LeasedTask, error) {
	args := []any{now + 1 + ttlMs, now * taskpick.TokenScale, now * taskpick.TokenScale}
	if order == taskpick.Random {
		r := randomPosition()
		args = append(args, pool, now, r, n, pool, now, r, n, n)
	} else {
		args = append(args, pool, now, n)
	}
	rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tasks []taskpick.LeasedTask
	for rows.Next() {
		var t taskpick.LeasedTask
		var neg int64
		if err := rows.Scan(&t.ID, &t.Payload, &neg, &t.Token, &t.Attempt, &t.MaxAttempts); err != nil {
			return nil, err
		}
		t.Priority = int32(-neg)
		tasks = append(tasks, t)
	}
	return tasks, rows.Err()
}

// pickSkipLocked leases up to n tasks on InnoDB: a locking read that skips rows other pickers
// have locked, then one UPDATE of the rows it locked. The tasks come in the pick's order.
func (b *Backend) pickSkipLocked(ctx context.Context, tx *sql.Tx, sts []*sql.Stmt, pool string, n int, now, ttlMs int64, order taskpick.Order) ([]taskpick.LeasedTask, error) {
	type cand struct {
		seq   int64
		task  taskpick.LeasedTask
		token uint64
	}
	var found []cand
	r := randomPosition()
	for _, st := range sts[:len(sts)-1] {
		if len(found) == n {
			break
		}
		args := []any{pool, now}
		if order == taskpick.Random {
			args = append(args, r)
		}
		rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, append(args, n-len(found))...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var c cand
			var neg int64
			if err := rows.Scan(&c.seq, &c.task.ID, &c.task.Payload, &neg, &c.token, &c.task.Attempt, &c.task.MaxAttempts); err != nil {
				rows.Close()
				return nil, err
			}
			c.task.Priority = int32(-neg)
			found = append(found, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	args := []any{now + 1 + ttlMs, now * taskpick.TokenScale, now * taskpick.TokenScale}
	for i := range n {
		seq := int64(0)
		if i < len(found) {
			seq = found[i].seq
		}
		args = append(args, seq)
	}
	if _, err := tx.StmtContext(ctx, sts[len(sts)-1]).ExecContext(ctx, args...); err != nil {
		return nil, err
	}
	tasks := make([]taskpick.LeasedTask, len(found))
	for i, c := range found {
		tasks[i] = c.task
		tasks[i].Token = taskpick.NextToken(c.token, now) // what the UPDATE stored
		tasks[i].Attempt++
	}
	return tasks, nil
}
