package sqltask

import (
	"context"
	"database/sql"

	"github.com/coordkit/coordkit/services/taskpick"
)

// Put implements taskpick.Backend: one transaction of one INSERT IGNORE per task, whose
// affected-row count says whether the id was new. Tasks with unique keys first lock their
// keys' rows, in key order (lockUniqueKeys), then are put in request order, each checking
// its key's holder before it inserts (uniqueput.go).
func (b *Backend) Put(ctx context.Context, pool string, tasks []taskpick.NewTask) ([]taskpick.PutResult, error) {
	results := make([]taskpick.PutResult, len(tasks))
	err := b.tx(ctx, func(tx *sql.Tx) error {
		clear(results)
		var now int64
		if err := tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now); err != nil {
			return err
		}
		if locked, err := b.lockUniqueKeys(ctx, tx, pool, tasks); err != nil {
			return err
		} else if locked {
			// The clock again: the locks may have waited for other Puts, whose tasks were
			// put at later times than the first reading.
			if err := tx.StmtContext(ctx, b.st.now).QueryRowContext(ctx).Scan(&now); err != nil {
				return err
			}
		}
		ins := tx.StmtContext(ctx, b.st.insert)
		for i, t := range tasks {
			if t.UniqueKey != "" {
				h, err := b.uniqueHolder(ctx, tx, pool, t.UniqueKey, now)
				if err != nil {
					return err
				}
				if h.held && h.id != t.ID {
					results[i] = taskpick.PutResult{Duplicate: true, HolderID: h.id, HolderState: h.state}
					continue
				}
			}
			runAt := now
			if t.Delay > 0 { // the clock may read up to a millisecond late: due strictly after
				runAt = now + 1 + ceilMillis(t.Delay)
			}
			res, err := ins.ExecContext(ctx, pool, t.ID, -int64(t.Priority), randomPosition(),
				runAt, taskpick.PutToken(now), t.MaxAttempts, nonNil(t.Payload))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			results[i].Created = n == 1
			if results[i].Created && t.UniqueKey != "" {
				if err := b.claimUnique(ctx, tx, pool, t, now); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	return results, nil
}

// nonNil stores an empty payload as an empty blob, not NULL.
func nonNil(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}
