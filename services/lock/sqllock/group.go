package sqllock

import (
	"context"
	"database/sql"
	"slices"

	"github.com/coordkit/coordkit/libs/client/batch"
)

// Group commit. On an engine whose write transactions lock the whole database (SQLite, see
// Dialect.Serialized) transactions run one at a time anyway, and each costs a BEGIN and a
// COMMIT of its own. There, the transactions that callers start while one is running queue
// and then run together, as one transaction, through a batch.Coalescer: each in a savepoint
// of its own, so one that fails (its decision, such as ErrNotOwner, or a database error) is
// rolled back alone and the others commit; a failed COMMIT fails them all, and inTx runs
// each again, as it does after any database error. A compare-and-set (cas.go) joins the
// group as its one UPDATE, without a savepoint; one whose UPDATE fails is answered with its
// error and the rest of the group runs again without it. A transaction started while none
// is running goes out at once, alone, as before.

// txJob is one transaction's work, for group commit: fn's, or a compare-and-set's (cas.go).
type txJob struct {
	key string
	m   missing
	fn  func(tx *sql.Tx, r row) (*row, error)
	cas *casWrite
}

// casWrite is a compare-and-set: write next over a row that is still r.
type casWrite struct{ r, next row }

// savepoint is the name of each grouped transaction's savepoint; they do not nest.
const savepoint = "coordkit_op"

// startGroupCommit turns group commit on for engines whose writes are serialized.
func (b *Backend) startGroupCommit() {
	if b.d.Serialized {
		b.group = batch.New(b.runGroup, batch.Config{MaxInFlight: 1, MaxBatch: 64})
	}
}

// runGroup runs jobs in one transaction, each in its own savepoint (a compare-and-set, one
// statement, needs none); one job alone runs as its own transaction. A job's result says
// whether its compare-and-set wrote. A compare-and-set whose UPDATE fails is answered with
// its error and the group, rolled back whole, runs again without it: a failure confined to
// one key fails that key's operation alone, as it would alone.
func (b *Backend) runGroup(ctx context.Context, jobs []txJob) ([]batch.Result[bool], error) {
	out := make([]batch.Result[bool], len(jobs))
	if len(jobs) == 1 {
		if c := jobs[0].cas; c != nil {
			out[0].Value, out[0].Err = b.casExec(ctx, b.st.casUpdate, jobs[0].key, c.r, c.next)
			return out, nil
		}
		out[0].Err = b.singleTx(ctx, jobs[0].key, jobs[0].m, jobs[0].fn)
		return out, nil
	}
	left := make([]int, len(jobs))
	for i := range left {
		left[i] = i
	}
	for len(left) > 0 {
		failed, err := b.runGroupOnce(ctx, jobs, left, out)
		if err != nil {
			return nil, err
		}
		if failed < 0 {
			break
		}
		left = slices.DeleteFunc(left, func(i int) bool { return i == failed })
	}
	return out, nil
}

// runGroupOnce runs the jobs of jobs that left lists in one transaction, writing their
// results into out. It returns the index of the first compare-and-set whose UPDATE failed
// (its error in out, the transaction rolled back), or -1 once the transaction committed.
func (b *Backend) runGroupOnce(ctx context.Context, jobs []txJob, left []int, out []batch.Result[bool]) (failed int, err error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return -1, dbError{err}
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	for _, i := range left {
		j := jobs[i]
		if c := j.cas; c != nil {
			if out[i].Value, out[i].Err = b.casExec(ctx, tx.StmtContext(ctx, b.st.casUpdate), j.key, c.r, c.next); out[i].Err != nil {
				return i, nil
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint); err != nil {
			return -1, dbError{err}
		}
		err := b.txBody(ctx, tx, j.key, j.m, j.fn)
		if err != nil {
			if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO "+savepoint); rerr != nil {
				return -1, dbError{rerr}
			}
		}
		if _, rerr := tx.ExecContext(ctx, "RELEASE "+savepoint); rerr != nil {
			return -1, dbError{rerr}
		}
		out[i].Err = err
	}
	if err := tx.Commit(); err != nil {
		return -1, dbError{err}
	}
	return -1, nil
}
