package sqltask

import (
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/coordkit/coordkit/services/taskpick"
)

// Put implements taskpick.Backend: one transaction of one INSERT IGNORE per task, whose
// affected-row count says whether the id was new.
func (b *Backend) Put(ctx context.Context, pool string, tasks []taskpick.NewTask) ([]bool, error) {
	created := make([]bool, len(tasks))
	err := b.tx(ctx, func(tx *sql.Tx) error {
		var now int64
		if err := tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now); err != nil {
			return err
		}
		var poolMax uint32 // the pool's default attempts, read only when a task leaves them unset
		if slices.ContainsFunc(tasks, func(t taskpick.NewTask) bool { return t.MaxAttempts == 0 }) {
			err := tx.StmtContext(ctx, b.st.poolMax).QueryRowContext(ctx, pool).Scan(&poolMax)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		ins := tx.StmtContext(ctx, b.st.insert)
		for i, t := range tasks {
			runAt := now
			if t.Delay > 0 { // the clock may read up to a millisecond late: due strictly after
				runAt = now + 1 + ceilMillis(t.Delay)
			}
			res, err := ins.ExecContext(ctx, pool, t.ID, -int64(t.Priority), randomPosition(),
				runAt, taskpick.PutToken(now), taskpick.MaxAttemptsFor(t.MaxAttempts, poolMax), nonNil(t.Payload))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			created[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	return created, nil
}

// nonNil stores an empty payload as an empty blob, not NULL.
func nonNil(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}
