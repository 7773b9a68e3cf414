package sqltask

import (
	"context"
	"database/sql"
	"errors"

	"github.com/coordkit/coordkit/services/taskpick"
)

// Get implements taskpick.Backend.
func (b *Backend) Get(ctx context.Context, pool, id string) (taskpick.Task, error) {
	t, err := scanTask(b.st.get.QueryRowContext(ctx, pool, id))
	if errors.Is(err, sql.ErrNoRows) {
		return taskpick.Task{}, taskpick.ErrNotFound
	}
	if err != nil {
		return taskpick.Task{}, b.fail(ctx, err)
	}
	return t, nil
}

// scanTask reads taskCols and the clock (0 where the query does not read it).
func scanTask(row interface{ Scan(...any) error }) (taskpick.Task, error) {
	var t taskpick.Task
	var neg, runAt, now int64
	var state int
	err := row.Scan(&t.ID, &t.Payload, &neg, &state, &t.Attempt, &t.MaxAttempts, &t.Failures, &t.Recoveries, &runAt, &t.LastError, &now)
	t.Priority = int32(-neg)
	t.RunAt = fromMillis(runAt)
	switch state {
	case stAvailable:
		t.State = taskpick.Available
		if runAt > now && now != 0 {
			t.State = taskpick.Delayed
		}
	case stLeased:
		t.State = taskpick.Leased
	case stDead:
		t.State = taskpick.Dead
	case stDone:
		t.State = taskpick.Done
	case stCancelled:
		t.State = taskpick.Cancelled
	}
	return t, err
}

// Stats implements taskpick.Backend.
func (b *Backend) Stats(ctx context.Context, pool string) (taskpick.Stats, error) {
	var s taskpick.Stats
	var oldest, now int64
	err := b.st.stats.QueryRowContext(ctx, pool).Scan(&s.Available, &s.Delayed, &s.Leased, &s.Dead, &s.Done, &s.Cancelled, &oldest, &now)
	if err != nil {
		return taskpick.Stats{}, b.fail(ctx, err)
	}
	s.Now = fromMillis(now)
	if s.Available > 0 {
		s.OldestAvailable = fromMillis(oldest)
	}
	return s, nil
}

// ListDead implements taskpick.Backend: the rows are read one at a time, and reading stops
// at the first that does not fit in maxBytes.
func (b *Backend) ListDead(ctx context.Context, pool string, limit, maxBytes int) ([]taskpick.Task, uint64, bool, error) {
	var total uint64
	if err := b.st.countDead.QueryRowContext(ctx, pool).Scan(&total); err != nil {
		return nil, 0, false, b.fail(ctx, err)
	}
	rows, err := b.st.listDead.QueryContext(ctx, pool, limit)
	if err != nil {
		return nil, 0, false, b.fail(ctx, err)
	}
	defer rows.Close()
	var out []taskpick.Task
	used := 0
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, 0, false, b.fail(ctx, err)
		}
		used += taskpick.AnswerBytes(len(t.Payload), len(t.ID)+len(t.LastError))
		if used > maxBytes && len(out) > 0 {
			return out, total, true, nil
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, false, b.fail(ctx, err)
	}
	return out, total, false, nil
}

// Requeue implements taskpick.Backend: one transaction of one UPDATE per id, each changing
// the task only if it is dead.
func (b *Backend) Requeue(ctx context.Context, pool string, ids []string) ([]bool, error) {
	requeued := make([]bool, len(ids))
	err := b.tx(ctx, func(tx *sql.Tx) error {
		var now int64
		if err := tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now); err != nil {
			return err
		}
		up := tx.StmtContext(ctx, b.st.requeue)
		for i, id := range ids {
			res, err := up.ExecContext(ctx, randomPosition(), now, pool, id)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			requeued[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	return requeued, nil
}
