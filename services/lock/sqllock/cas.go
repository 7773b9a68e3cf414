package sqllock

import (
	"context"
	"database/sql"
	"errors"

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
