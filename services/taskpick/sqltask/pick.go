package sqltask

import (
	"context"
	"database/sql"
	"errors"
	"slices"
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
// pickers take disjoint tasks without waiting; when that read skipped due tasks and found
// fewer than asked, the pick runs again taking those first, see takeSkipped; on SQLite the IMMEDIATE transaction holds the
// whole file), then leases the ones it keeps with one UPDATE. The tasks come back in the
// order they were read: pick order. On PostgreSQL the whole pick is one statement
// (pickStatement).
func (b *Backend) Pick(ctx context.Context, pool string, spec taskpick.PickSpec) (taskpick.Picked, error) {
	if b.oneStatementPick() {
		return b.pickInOneStatement(ctx, pool, spec)
	}
	var out taskpick.Picked
	var now int64
	// Statements are prepared before the transaction: preparing takes a connection of its
	// own, and SQLite's pool has one, which the transaction holds.
	sts, err := b.pickStatements(ctx, spec.N, spec.Order)
	if err != nil {
		return taskpick.Picked{}, b.fail(ctx, err)
	}
	run := func(skippedFirst, limited bool) error {
		return b.tx(ctx, func(tx *sql.Tx) (err error) {
			out = taskpick.Picked{}
			if !limited {
				// On MySQL this read takes the transaction's snapshot; a limited pick's
				// first read is the row's lock instead, so that its count sees every pick
				// that held the lock before.
				var paused, hasLimits int
				if err := tx.StmtContext(ctx, b.st.nowPaused).QueryRowContext(ctx, pool).Scan(&now, &paused, &hasLimits); err != nil {
					return err
				}
				if out.Paused = paused != 0; out.Paused {
					return nil
				}
				if hasLimits == 0 {
					out.Tasks, out.Full, err = b.pickLocked(ctx, tx, sts, pool, spec, spec.N, now, skippedFirst)
					return err
				}
				if b.d.ForUpdate != "" {
					return errLimited
				}
			}
			l, err := b.lockLimit(ctx, tx, pool)
			if err != nil {
				return err
			}
			now = l.now
			if out.Paused = l.paused; out.Paused {
				return nil
			}
			want, next, err := b.placesLeft(ctx, tx, pool, l, spec.N)
			if err != nil || want == 0 {
				out.Limited, out.NextDue = err == nil, next
				return err
			}
			if out.Tasks, out.Full, err = b.pickLocked(ctx, tx, sts, pool, spec, want, now, skippedFirst); err != nil {
				return err
			}
			return b.takeTokens(ctx, tx, pool, l, len(out.Tasks))
		})
	}
	skipped, limited := false, false
	for range 4 { // at most: limited, then skipped, then done
		err = run(skipped, limited)
		if errors.Is(err, errLimited) {
			limited = true
		} else if errors.Is(err, errSkipped) {
			skipped = true
		} else {
			break
		}
	}
	if err != nil {
		return taskpick.Picked{}, b.fail(ctx, err)
	}
	if len(out.Tasks) < spec.N && !out.Full && !out.Paused && !out.Limited {
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

// pickCols are the columns a pick reads of each candidate: what it answers, and its place in
// every pick order.
const pickCols = "seq, id, payload, neg_priority, token, attempt, max_attempts, run_at, rnd"

// pickStmts are the statements of a pick of n in one order.
type pickStmts struct {
	// cands read the candidates, skipping rows others hold (where the engine has row locks).
	cands []*sql.Stmt
	// lease leases n rows by seq, giving each its lease's digest (unused places hold seq 0,
	// which no row has).
	lease *sql.Stmt
	// peek and lockSeqs find the rows cands skipped (see takeSkipped); nil without row locks.
	peek     []*sql.Stmt
	lockSeqs *sql.Stmt
}

// pickStatements prepares (once, then from the cache) what a pick of n in order runs.
func (b *Backend) pickStatements(ctx context.Context, n int, order taskpick.Order) (pickStmts, error) {
	var digests strings.Builder
	digests.WriteString(", lease_hash = CASE seq")
	for range n {
		digests.WriteString(" WHEN ? THEN ?")
	}
	digests.WriteString(" ELSE lease_hash END")
	var out pickStmts
	prep := func(qs ...string) ([]*sql.Stmt, error) {
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
	var err error
	if out.cands, err = prep(candidates(pickCols, order, b.d.SkipLocked)...); err != nil {
		return out, err
	}
	lease, err := prep("UPDATE " + table + leaseSet + digests.String() + " WHERE seq IN (" + placeholders(n) + ")")
	if err != nil {
		return out, err
	}
	out.lease = lease[0]
	if b.d.SkipLocked == "" {
		return out, nil
	}
	if out.peek, err = prep(candidates("seq", order, "")...); err != nil {
		return out, err
	}
	lock, err := prep("SELECT " + pickCols + ", pool, state FROM " + table + " WHERE seq IN (" + placeholders(n) + ")" + b.d.ForUpdate)
	if err != nil {
		return out, err
	}
	out.lockSeqs = lock[0]
	return out, nil
}

// pickLocked leases up to want (at most spec.N) tasks: the candidate reads, one row at a
// time until the answer's budget is spent (full), then one UPDATE of the rows it kept.
func (b *Backend) pickLocked(ctx context.Context, tx *sql.Tx, sts pickStmts, pool string, spec taskpick.PickSpec, want int, now int64, skippedFirst bool) (tasks []taskpick.LeasedTask, full bool, err error) {
	n := want
	var found []cand
	have := map[int64]bool{}
	used := 0
	r := randomPosition()
	if skippedFirst {
		skipped, err := b.takeSkipped(ctx, tx, sts, pool, spec.Order, now, r, n)
		if err != nil {
			return nil, false, err
		}
		for _, c := range skipped {
			used += taskpick.AnswerBytes(len(c.task.Payload), len(c.task.ID))
			if used > spec.MaxBytes && len(found) > 0 {
				full = true
				break
			}
			found = append(found, c)
			have[c.seq] = true
		}
	}
	for _, st := range sts.cands {
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
			c, err := scanCand(rows)
			if err != nil {
				rows.Close()
				return nil, false, err
			}
			if have[c.seq] { // locked by takeSkipped: this transaction's own lock
				continue
			}
			used += taskpick.AnswerBytes(len(c.task.Payload), len(c.task.ID))
			if used > spec.MaxBytes && len(found) > 0 {
				full = true
				break
			}
			found = append(found, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, false, err
		}
	}
	if skippedFirst {
		slices.SortFunc(found, pickOrder(spec.Order, r))
	} else if sts.peek != nil && len(found) < n && !full {
		missed, err := b.missed(ctx, tx, sts, pool, spec.Order, now, r, n, found)
		if err != nil {
			return nil, false, err
		}
		if len(missed) > 0 {
			return nil, false, errSkipped
		}
	}
	if len(found) == 0 {
		return nil, false, nil
	}
	args := []any{now + 1 + ceilMillis(spec.TTL), now * taskpick.TokenScale, now * taskpick.TokenScale}
	n = spec.N // the lease statement's places
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
	if _, err := tx.StmtContext(ctx, sts.lease).ExecContext(ctx, args...); err != nil {
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
