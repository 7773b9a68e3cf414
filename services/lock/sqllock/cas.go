package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/coordkit/coordkit/libs/client/batch"

	"github.com/coordkit/coordkit/services/lock"
)

// Compare-and-set. On MySQL a lock transaction costs four round trips (BEGIN, the locking
// read, the write, COMMIT) and as many statements for the server, after the plain read most
// operations make first. An operation that decided on the row that plain read returned can
// write its decision instead with one UPDATE (autocommit) that applies only when the row is
// still exactly as read: every column the decision reads is compared, and the lease is still
// as live, or as lapsed, at the UPDATE's clock as it was at the read's. The decision is then
// the one its transaction would make now; its expiry, reckoned from the read's clock, is
// earlier than the transaction's would be, and still after the expiry reported to the
// caller, which is measured before the read. When the UPDATE changes no row (the row
// changed, was deleted, or would be written unchanged), or fails as a deadlock victim, which
// applied nothing, the operation runs its transaction as before.
//
// Decisions that write nothing (the lock is held by another, the hold limit, not the owner)
// are answered from the read: it is a consistent read made after the call began, a point at
// which that answer was true. Placeholder rows (token 0), whose first token needs the fence
// floor, and fair mode, which also changes the key's line of waiters, always run their
// transaction. On SQLite the UPDATE joins the group of transactions (group.go), where it
// takes one statement of the single writer's time instead of a savepoint, a read and a
// write.
//
// The comparison must cover every column: two free rows of a key released within the same
// millisecond differ only in their token (TestCASRivalsOnOneKey finds the repeated token
// when the token is left out).

// casRow writes next over key's row if the row is still r (see above), and reports whether
// it did. ok false with a nil error means the operation must run its transaction. Where
// transactions are grouped, the compare-and-set joins the group (waiting for it whole, as a
// grouped transaction does).
func (b *Backend) casRow(ctx context.Context, key string, r, next row) (ok bool, err error) {
	if b.cases != nil {
		ok, err = b.cases.Do(ctx, casJob{key: key, casWrite: casWrite{r, next}})
		if b.d.Victim(ctx, err) {
			return false, nil
		}
		return ok, err
	}
	if b.group != nil {
		ok, err = b.group.Do(context.WithoutCancel(ctx), txJob{key: key, cas: &casWrite{r, next}})
		var de dbError
		if errors.As(err, &de) {
			err = de.error
		}
		return ok, err
	}
	ok, err = b.casExec(ctx, b.st.casUpdate, key, r, next)
	if b.d.Victim(ctx, err) {
		return false, nil
	}
	return ok, err
}

// casExec runs the compare-and-set statement st.
func (b *Backend) casExec(ctx context.Context, st *sql.Stmt, key string, r, next row) (bool, error) {
	res, err := st.ExecContext(ctx,
		next.owner, next.holder, next.holds, next.token, next.expiresAt, next.ttlMs,
		b.scope, key, r.owner, r.holder, r.holds, r.token, r.expiresAt, r.ttlMs, r.held())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// casDecision runs decide on r, the row a plain read returned, and writes what it decided
// with casRow. done says whether the operation ended here, with err its answer (decide's, or
// the database's wrapped in lock.Unavailable); otherwise it runs its transaction.
func (b *Backend) casDecision(ctx context.Context, key string, r row, decide func(r row) (*row, error)) (done bool, err error) {
	next, err := decide(r)
	if err != nil || next == nil {
		return true, err
	}
	ok, err := b.casRow(ctx, key, r, *next)
	if err != nil {
		return true, lock.Unavailable(ctx, b.d.Name, err)
	}
	return ok, nil
}

// Batched compare-and-set (PostgreSQL, Dialect.BatchedCAS). The compare-and-sets that callers
// start while casInFlight are in flight go out together, through a batch.Coalescer, as one
// UPDATE … FROM (VALUES …) of up to casBatch rows: one statement, one round trip and one
// commit (one WAL flush) for all of them, each row still written only when it is exactly as
// its operation read it. The rows are listed in key order, the order in which the UPDATE's
// plan (a nested loop over the list) visits and locks them, so two batches on the same keys
// do not deadlock each other (one chosen as a deadlock victim all the same applied nothing,
// and its operations run their transactions). When two operations of one batch expect the
// same row, at most one writes; the others find it changed, as they would one after the
// other.

const (
	// casBatch caps the compare-and-sets of one batched UPDATE.
	casBatch = 16
	// casInFlight is how many batched UPDATEs run at once before further compare-and-sets
	// wait to be batched.
	casInFlight = 2
)

// casJob is one compare-and-set of a batch.
type casJob struct {
	key string
	casWrite
}

// startBatchedCAS turns batched compare-and-set on for dialects that have it.
func (b *Backend) startBatchedCAS() {
	if b.d.BatchedCAS {
		b.cases = batch.New(b.runCAS, batch.Config{MaxInFlight: casInFlight, MaxBatch: casBatch})
	}
}

// runCAS runs jobs as one statement; one job alone runs the single compare-and-set.
func (b *Backend) runCAS(ctx context.Context, jobs []casJob) ([]batch.Result[bool], error) {
	out := make([]batch.Result[bool], len(jobs))
	if len(jobs) == 1 {
		out[0].Value, out[0].Err = b.casExec(ctx, b.st.casUpdate, jobs[0].key, jobs[0].r, jobs[0].next)
		return out, nil
	}
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return strings.Compare(jobs[i].key, jobs[j].key) })
	// batchRows rows, filled with rows no lock row can match (token -1).
	n := batchRows(len(jobs))
	args := make([]any, 0, 14*n+1)
	for _, i := range order {
		j := jobs[i]
		args = append(args, j.key, j.next.owner, j.next.holder, int64(j.next.holds), int64(j.next.token), j.next.expiresAt, j.next.ttlMs,
			j.r.owner, j.r.holder, int64(j.r.holds), int64(j.r.token), j.r.expiresAt, j.r.ttlMs, j.r.held(), int64(i))
	}
	for range n - len(jobs) {
		args = append(args, "", "", "", int64(0), int64(0), int64(0), int64(0), "", "", int64(0), int64(-1), int64(0), int64(0), false, int64(-1))
	}
	args = append(args, b.scope)
	st, err := b.st.casMany(ctx, b.db, b.d, n)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var i int64
		if err := rows.Scan(&i); err != nil {
			return nil, err
		}
		if i < 0 || int(i) >= len(jobs) {
			return nil, fmt.Errorf("sqllock: batched compare-and-set answered job %d of %d", i, len(jobs))
		}
		out[i].Value = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// casManySQL is the batched compare-and-set of n rows: per row the key, the row to write,
// the row as read (its six columns and whether its lease was live) and the job's number;
// then the scope. It answers the numbers of the jobs that wrote.
func casManySQL(d Dialect, n int) string {
	values := make([]string, n)
	for i := range values {
		values[i] = "(?::text, ?::text, ?::text, ?::bigint, ?::bigint, ?::bigint, ?::bigint, ?::text, ?::text, ?::bigint, ?::bigint, ?::bigint, ?::bigint, ?::boolean, ?::bigint)"
	}
	return "UPDATE " + leasesTable + " l SET owner = v.n_owner, holder_id = v.n_holder, hold_count = v.n_holds," +
		" fencing_token = v.n_token, expires_at = v.n_expires, ttl_ms = v.n_ttl" +
		" FROM (VALUES " + strings.Join(values, ", ") + ") AS v(k, n_owner, n_holder, n_holds, n_token, n_expires, n_ttl," +
		" o_owner, o_holder, o_holds, o_token, o_expires, o_ttl, o_held, job)" +
		" WHERE l.scope = ? AND l.lock_key = v.k AND l.owner = v.o_owner AND l.holder_id = v.o_holder AND l.hold_count = v.o_holds" +
		" AND l.fencing_token = v.o_token AND l.expires_at = v.o_expires AND l.ttl_ms = v.o_ttl" +
		" AND (l.owner = '' OR (l.expires_at > " + d.NowMillis + ") = v.o_held)" +
		" RETURNING v.job"
}
