package sqltask

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

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

// Pick implements taskpick.Backend: one transaction that reads up to n due tasks in the pick's
// order (on InnoDB with a locking read that skips rows other pickers hold, so concurrent
// pickers take disjoint tasks without waiting; on SQLite the IMMEDIATE transaction holds the
// whole file), then leases the ones it keeps with one UPDATE. The tasks come back in the
// order they were read: pick order.
func (b *Backend) Pick(ctx context.Context, pool string, spec taskpick.PickSpec) (taskpick.Picked, error) {
	var out taskpick.Picked
	var now int64
	// Statements are prepared before the transaction: preparing takes a connection of its
	// own, and SQLite's pool has one, which the transaction holds.
	sts, err := b.pickStatements(ctx, spec.N, spec.Order)
	if err != nil {
		return taskpick.Picked{}, b.fail(ctx, err)
	}
	err = b.tx(ctx, func(tx *sql.Tx) (err error) {
		if err := tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now); err != nil {
			return err
		}
		out.Tasks, out.Full, err = b.pickLocked(ctx, tx, sts, pool, spec, now)
		return err
	})
	if err != nil {
		return taskpick.Picked{}, b.fail(ctx, err)
	}
	if len(out.Tasks) < spec.N && !out.Full {
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

// pickStatements prepares (once, then from the cache) what a pick of n in order runs: the
// candidate SELECTs, then an UPDATE of n rows by seq that gives each its lease's digest
// (unused places hold seq 0, which no row has).
func (b *Backend) pickStatements(ctx context.Context, n int, order taskpick.Order) ([]*sql.Stmt, error) {
	var digests strings.Builder
	digests.WriteString(", lease_hash = CASE seq")
	for range n {
		digests.WriteString(" WHEN ? THEN ?")
	}
	digests.WriteString(" ELSE lease_hash END")
	qs := append(candidates("seq, id, payload, neg_priority, token, attempt, max_attempts", order, b.d.SkipLocked),
		"UPDATE "+table+leaseSet+digests.String()+" WHERE seq IN ("+placeholders(n)+")")
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

// pickLocked leases up to spec.N tasks: the candidate reads, one row at a time until the
// answer's budget is spent (full), then one UPDATE of the rows it kept.
func (b *Backend) pickLocked(ctx context.Context, tx *sql.Tx, sts []*sql.Stmt, pool string, spec taskpick.PickSpec, now int64) (tasks []taskpick.LeasedTask, full bool, err error) {
	type cand struct {
		seq   int64
		task  taskpick.LeasedTask
		token uint64
	}
	n := spec.N
	var found []cand
	used := 0
	r := randomPosition()
	for _, st := range sts[:len(sts)-1] {
		if len(found) == n || full {
			break
		}
		args := []any{pool, now}
		if spec.Order == taskpick.Random {
			args = append(args, r)
		}
		rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, append(args, n-len(found))...)
		if err != nil {
			return nil, false, err
		}
		for rows.Next() {
			var c cand
			var neg int64
			if err := rows.Scan(&c.seq, &c.task.ID, &c.task.Payload, &neg, &c.token, &c.task.Attempt, &c.task.MaxAttempts); err != nil {
				rows.Close()
				return nil, false, err
			}
			used += taskpick.AnswerBytes(len(c.task.Payload), len(c.task.ID))
			if used > spec.MaxBytes && len(found) > 0 {
				full = true
				break
			}
			c.task.Priority = int32(-neg)
			found = append(found, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, false, err
		}
	}
	if len(found) == 0 {
		return nil, false, nil
	}
	args := []any{now + 1 + ceilMillis(spec.TTL), now * taskpick.TokenScale, now * taskpick.TokenScale}
	for i := range n {
		seq, digest := int64(0), ""
		if i < len(found) {
			seq, digest = found[i].seq, spec.Digests[i]
		}
		args = append(args, seq, digest)
	}
	for i := range n {
		seq := int64(0)
		if i < len(found) {
			seq = found[i].seq
		}
		args = append(args, seq)
	}
	if _, err := tx.StmtContext(ctx, sts[len(sts)-1]).ExecContext(ctx, args...); err != nil {
		return nil, false, err
	}
	tasks = make([]taskpick.LeasedTask, len(found))
	for i, c := range found {
		tasks[i] = c.task
		tasks[i].Token = taskpick.NextToken(c.token, now) // what the UPDATE stored
		tasks[i].Attempt++
	}
	return tasks, full, nil
}
