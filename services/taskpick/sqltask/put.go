package sqltask

import (
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/coordkit/coordkit/services/taskpick"
)

// Put implements taskpick.Backend: one transaction of one INSERT IGNORE per task, whose
// affected-row count says whether the id was new. Tasks with unique keys first lock their
// keys' rows, in key order (lockUniqueKeys), then are put in request order, each checking
// its key's holder before it inserts (uniqueput.go).
func (b *Backend) Put(ctx context.Context, pool string, tasks []taskpick.NewTask) ([]taskpick.PutResult, error) {
	var results []taskpick.PutResult
	err := b.txWith(ctx, b.putTxOptions(tasks), func(tx *sql.Tx) error {
		var err error
		results, err = b.putIn(ctx, tx, pool, tasks)
		return err
	})
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	return results, nil
}

// putIn puts tasks into pool within tx, as Put does, and says per task what it did.
func (b *Backend) putIn(ctx context.Context, tx *sql.Tx, pool string, tasks []taskpick.NewTask) ([]taskpick.PutResult, error) {
	results := make([]taskpick.PutResult, len(tasks))
	var now int64
	if err := tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now); err != nil {
		return nil, err
	}
	if locked, err := b.lockUniqueKeys(ctx, tx, pool, tasks); err != nil {
		return nil, err
	} else if locked {
		// The clock again: the locks may have waited for other Puts, whose tasks were put
		// at later times than the first reading.
		if err := tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now); err != nil {
			return nil, err
		}
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
		if t.UniqueKey != "" {
			h, err := b.uniqueHolder(ctx, tx, pool, t.UniqueKey, now)
			if err != nil {
				return nil, err
			}
			// The holder's own id is an idempotent Put while its task exists; once it is
			// gone (a period outlives it), putting that id again is a new task.
			if h.held && (h.id != t.ID || h.gone) {
				results[i] = taskpick.PutResult{Duplicate: true, HolderID: h.id, HolderState: h.state}
				continue
			}
		}
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
		results[i].Created = n == 1
		if results[i].Created && t.UniqueKey != "" {
			if err := b.claimUnique(ctx, tx, pool, t, now); err != nil {
				return nil, err
			}
		}
	}
	return results, nil
}

// putTxOptions are the options of a Put's transaction: on MySQL, a Put with unique keys runs
// in READ COMMITTED, so that it reads the holder's task as last committed without locking it
// (REPEATABLE READ would read it as of the Put's first read, or lock it, making a Pick that
// waits for it a party to deadlocks), and inserts without gap locks. PostgreSQL runs in READ
// COMMITTED anyway, and SQLite's write transactions are serial.
func (b *Backend) putTxOptions(tasks []taskpick.NewTask) *sql.TxOptions {
	if b.d.Name != "mysql" || !slices.ContainsFunc(tasks, func(t taskpick.NewTask) bool { return t.UniqueKey != "" }) {
		return nil
	}
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
}

// nonNil stores an empty payload as an empty blob, not NULL.
func nonNil(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}
