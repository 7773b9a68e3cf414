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
	var created []bool
	err := b.tx(ctx, func(tx *sql.Tx) error {
		var err error
		created, err = b.putIn(ctx, tx, pool, tasks)
		return err
	})
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	return created, nil
}

// putIn adds the tasks that do not exist in pool within tx; created[i] says whether tasks[i]
// was added.
func (b *Backend) putIn(ctx context.Context, tx *sql.Tx, pool string, tasks []taskpick.NewTask) ([]bool, error) {
	created := make([]bool, len(tasks))
	var now int64
	if err := tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now); err != nil {
		return nil, err
	}
	var poolMax uint32 // the pool's default attempts, read only when a task leaves them unset
	if slices.ContainsFunc(tasks, func(t taskpick.NewTask) bool { return t.MaxAttempts == 0 }) {
		err := tx.StmtContext(ctx, b.st.poolMax).QueryRowContext(ctx, pool).Scan(&poolMax)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
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
			return nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		created[i] = n == 1
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
