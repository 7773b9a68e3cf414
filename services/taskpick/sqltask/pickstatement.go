package sqltask

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/coordkit/coordkit/services/taskpick"
)

// The PostgreSQL pick is one statement, so one round trip and one implicit transaction:
//
//	clock    reads the database clock once (MATERIALIZED: clock_timestamp() is volatile);
//	locked   locks up to n due tasks of the pool in pick order, FOR UPDATE SKIP LOCKED, in a
//	         CTE of its own, so the LIMIT applies once (a subquery in WHERE may be run again
//	         by the planner and lock more rows than it keeps);
//	numbered numbers them in pick order with the answer's bytes so far (AnswerBytes);
//	kept     keeps the first, and those that fit in the answer's budget;
//	upd      leases the kept rows: the i-th in pick order under the i-th digest;
//
// and the SELECT answers one row per leased task in pick order, or one row of NULLs when
// none was, each with the clock, how many were locked (more than leased: the budget stopped
// the pick) and, when fewer than n were leased, the earliest due time of a delayed task.
//
// PostgreSQL's SKIP LOCKED skips only rows that another transaction has locked, and only
// pickers lock available tasks (its row locks take no index ranges or neighbours, as
// InnoDB's do), so a row it skips is being leased by another pick: the pick needs no second
// look at what it skipped (takeSkipped). ORDER_RANDOM reads from a random position on, then
// from the start for what is left, as the other engines do.

// pickSizeExpr is taskpick.AnswerBytes of a row, in SQL.
var pickSizeExpr = "4 * ((octet_length(payload) + 2) / 3) + 6 * octet_length(id) + " + strconv.Itoa(taskpick.TaskOverheadBytes)

// pickStatement is the one-statement pick of up to n in order o; it leases nothing while the
// pool is paused (poolTable), nor, unless locked, while the pool has limits (limitedExpr),
// and says so (a locked pick runs in pickLimited's transaction, which holds the pool's row
// and worked out what the limits leave). Parameters: pool (for paused), pool, (random: r, pool, r), max bytes,
// lease ttl in ms, digests (text[]), pool.
//
// n is in the text, not a parameter: PostgreSQL plans a prepared statement once for every
// value of its parameters after a few runs, and with an unknown LIMIT it estimates a third
// of the pool, and leases the rows by scanning the whole table (a hash join) rather than by
// primary key: 15–50 ms a pick of 10 among 10,000 tasks instead of under 1 ms.
func pickStatement(o taskpick.Order, n int, now string, locked bool) string {
	limit := strconv.Itoa(n)
	avail := strconv.Itoa(stAvailable)
	cols := "seq, neg_priority, run_at, rnd, " + pickSizeExpr + " AS size"
	due := " FROM " + table + " WHERE pool = ? AND state = " + avail + " AND " + pickOnly[o] + " AND run_at <= (SELECT now FROM clock)" +
		" AND (SELECT paused FROM clock) = 0"
	if !locked {
		due += " AND (SELECT limited FROM clock) = 0"
	}
	var lockedCTE, window string
	if o == taskpick.Random {
		lockedCTE = "first AS (SELECT " + cols + due + " AND rnd >= ? ORDER BY rnd LIMIT " + limit + " FOR UPDATE SKIP LOCKED), " +
			"rest AS (SELECT " + cols + due + " AND rnd < ? ORDER BY rnd LIMIT (" + limit + " - (SELECT COUNT(*) FROM first)) FOR UPDATE SKIP LOCKED), " +
			"locked AS (SELECT *, 0 AS part FROM first UNION ALL SELECT *, 1 FROM rest), "
		window = "part, rnd, seq"
	} else {
		lockedCTE = "locked AS (SELECT " + cols + due + orderBy(o) + " LIMIT " + limit + " FOR UPDATE SKIP LOCKED), "
		window = "run_at, seq"
		if o == taskpick.Priority {
			window = "neg_priority, run_at, seq"
		}
	}
	return "WITH clock AS MATERIALIZED (SELECT " + now + " AS now, COALESCE(MAX(paused), 0) AS paused, " + limitedExpr + " AS limited FROM " +
		poolTable + " WHERE pool = ?), " + lockedCTE +
		"numbered AS (SELECT seq, row_number() OVER w AS i, SUM(size) OVER w AS used FROM locked" +
		" WINDOW w AS (ORDER BY " + window + " ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)), " +
		"kept AS (SELECT seq, i FROM numbered WHERE i = 1 OR used <= ?), " +
		"upd AS (UPDATE " + table + " t SET state = " + strconv.Itoa(stLeased) + ", attempt = t.attempt + 1," +
		" run_at = clock.now + 1 + ?, token = GREATEST(t.token + 1, clock.now * " + strconv.Itoa(taskpick.TokenScale) + ")," +
		" lease_hash = (?::text[])[kept.i]" +
		" FROM kept, clock WHERE t.seq = kept.seq" +
		" RETURNING kept.i, t.id, t.payload, t.neg_priority, t.token, t.attempt, t.max_attempts) " +
		"SELECT clock.now, clock.paused, clock.limited, (SELECT COUNT(*) FROM locked)," +
		" CASE WHEN (SELECT COUNT(*) FROM upd) < " + limit + " THEN (SELECT MIN(run_at) FROM " + table +
		" WHERE pool = ? AND state = " + avail + " AND " + pickOnly[taskpick.FIFO] + " AND run_at > clock.now) END," +
		" upd.i, upd.id, upd.payload, upd.neg_priority, upd.token, upd.attempt, upd.max_attempts" +
		" FROM clock LEFT JOIN upd ON TRUE ORDER BY upd.i"
}

// pickInOneStatement is Pick on PostgreSQL: see pickStatement; a pool with limits is picked
// by pickLimited.
func (b *Backend) pickInOneStatement(ctx context.Context, pool string, spec taskpick.PickSpec) (taskpick.Picked, error) {
	st, err := b.stmtN(ctx, pickStatement(spec.Order, spec.N, b.d.NowMillis, false))
	if err != nil {
		return taskpick.Picked{}, b.fail(ctx, err)
	}
	args := pickArgs(pool, spec, spec.N)
	var out taskpick.Picked
	var limited bool
	err = b.d.Retry(ctx, func() error {
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		out, limited, err = scanPick(rows, spec.N)
		return err
	})
	if err != nil {
		return taskpick.Picked{}, b.fail(ctx, err)
	}
	if limited && !out.Paused {
		return b.pickLimited(ctx, pool, spec)
	}
	return out, nil
}

// pickLimited is Pick on PostgreSQL of a pool with limits: one transaction that locks the
// pool's row, works out what the limits leave (placesLeft), leases that with pickStatement
// and takes the tokens. Each statement of the transaction sees what committed before it began (READ
// COMMITTED), so the count sees every lease of the picks that held the row before.
func (b *Backend) pickLimited(ctx context.Context, pool string, spec taskpick.PickSpec) (taskpick.Picked, error) {
	var out taskpick.Picked
	err := b.tx(ctx, func(tx *sql.Tx) error {
		out = taskpick.Picked{}
		l, err := b.lockLimit(ctx, tx, pool)
		if err != nil {
			return err
		}
		if out.Paused = l.paused; out.Paused {
			return nil
		}
		want, next, err := b.placesLeft(ctx, tx, pool, l, spec.N)
		if err != nil || want == 0 {
			out.Limited, out.NextDue = err == nil, next
			return err
		}
		// The text goes as it is (the driver caches its plan per connection): preparing it on
		// the pool here would wait for a second connection while this one holds the pool's
		// row, which the other pickers, each holding a connection, wait for.
		rows, err := tx.QueryContext(ctx, pickStatement(spec.Order, want, b.d.NowMillis, true), pickArgs(pool, spec, want)...)
		if err != nil {
			return err
		}
		if out, _, err = scanPick(rows, want); err != nil {
			return err
		}
		return b.takeTokens(ctx, tx, pool, l, len(out.Tasks))
	})
	if err != nil {
		return taskpick.Picked{}, b.fail(ctx, err)
	}
	return out, nil
}

// pickArgs are pickStatement's parameters for a pick of n.
func pickArgs(pool string, spec taskpick.PickSpec, n int) []any {
	args := []any{pool, pool}
	if spec.Order == taskpick.Random {
		r := randomPosition()
		args = append(args, r, pool, r)
	}
	return append(args, spec.MaxBytes, ceilMillis(spec.TTL), spec.Digests[:n], pool)
}

// scanPick reads pickStatement's answer for a pick of n, and whether the pool has limits,
// and closes rows.
func scanPick(rows *sql.Rows, n int) (taskpick.Picked, bool, error) {
	defer rows.Close()
	var out taskpick.Picked
	var locked, paused, limited int
	var due sql.NullInt64
	for rows.Next() {
		var now int64
		var i, neg, token, attempt, maxAttempts sql.NullInt64
		var id sql.NullString
		var payload []byte
		if err := rows.Scan(&now, &paused, &limited, &locked, &due, &i, &id, &payload, &neg, &token, &attempt, &maxAttempts); err != nil {
			return out, false, err
		}
		if !i.Valid {
			continue // nothing leased: the one row of the clock
		}
		out.Tasks = append(out.Tasks, taskpick.LeasedTask{
			ID: id.String, Payload: payload, Priority: int32(-neg.Int64), Token: uint64(token.Int64),
			Attempt: uint32(attempt.Int64), MaxAttempts: uint32(maxAttempts.Int64),
		})
	}
	if err := rows.Err(); err != nil {
		return out, false, err
	}
	out.Full = locked > len(out.Tasks)
	if out.Paused = paused != 0; out.Paused {
		due = sql.NullInt64{}
	}
	if len(out.Tasks) < n && !out.Full && due.Valid {
		out.NextDue = fromMillis(due.Int64)
	}
	return out, limited != 0, nil
}

// oneStatementPick says whether the engine picks with pickStatement.
func (b *Backend) oneStatementPick() bool { return b.d.Name == "postgres" }
