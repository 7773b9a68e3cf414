package sqllock

import (
	"context"
	"database/sql"

	"github.com/coordkit/coordkit/libs/batch"
)

// Group commit. On an engine whose write transactions lock the whole database (SQLite, see
// Dialect.InsertInTx) transactions run one at a time anyway, and each costs a BEGIN and a
// COMMIT of its own. There, the transactions that callers start while one is running queue
// and then run together, as one transaction, through a batch.Coalescer: each in a savepoint
// of its own, so one that fails (its decision, such as ErrNotOwner, or a database error) is
// rolled back alone and the others commit; a failed COMMIT fails them all, and inTx runs
// each again, as it does after any database error. A transaction started while none is
// running goes out at once, alone, as before.

// txJob is one transaction's work, for group commit.
type txJob struct {
	key string
	m   missing
	fn  func(tx *sql.Tx, r row) (*row, error)
}

// savepoint is the name of each grouped transaction's savepoint; they do not nest.
const savepoint = "coordkit_op"

// startGroupCommit turns group commit on for engines whose writes are serialized.
func (b *Backend) startGroupCommit() {
	if b.d.InsertInTx {
		b.group = batch.New(b.runGroup, batch.Config{MaxInFlight: 1, MaxBatch: 64})
	}
}

// runGroup runs jobs in one transaction, each in its own savepoint; one job alone runs as
// its own transaction.
func (b *Backend) runGroup(ctx context.Context, jobs []txJob) ([]batch.Result[struct{}], error) {
	out := make([]batch.Result[struct{}], len(jobs))
	if len(jobs) == 1 {
		out[0].Err = b.singleTx(ctx, jobs[0].key, jobs[0].m, jobs[0].fn)
		return out, nil
	}
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, dbError{err}
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	for i, j := range jobs {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint); err != nil {
			return nil, dbError{err}
		}
		err := b.txBody(ctx, tx, j.key, j.m, j.fn)
		if err != nil {
			if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO "+savepoint); rerr != nil {
				return nil, dbError{rerr}
			}
		}
		if _, rerr := tx.ExecContext(ctx, "RELEASE "+savepoint); rerr != nil {
			return nil, dbError{rerr}
		}
		out[i].Err = err
	}
	if err := tx.Commit(); err != nil {
		return nil, dbError{err}
	}
	return out, nil
}
