package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// row is a lock row as read, with the database's clock.
type row struct {
	owner     string // the digest the service passed, never a secret
	holder    string // the lease's random public id; "" in rows older versions wrote
	holds     uint32
	token     uint64 // 0: a placeholder that never had a holder
	expiresAt int64  // database clock, Unix ms
	ttlMs     int64  // the lease's own ttl, for a Renew without one
	now       int64  // database clock, Unix ms
}

// held reports whether the row is a live lease.
func (r row) held() bool { return r.owner != "" && r.expiresAt > r.now }

// state converts the row to the public view, moving its expiry onto the local clock.
func (r row) state() lock.State {
	if !r.held() {
		return lock.State{}
	}
	return lock.State{
		Held: true, HolderID: r.holder, FencingToken: r.token, HoldCount: r.holds,
		ExpiresAt: time.Now().Add(time.Duration(r.expiresAt-r.now) * time.Millisecond),
	}
}

func scanRow(s *sql.Row) (row, error) {
	var r row
	err := s.Scan(&r.owner, &r.holder, &r.holds, &r.token, &r.expiresAt, &r.ttlMs, &r.now)
	return r, err
}

// expiry is the expires_at to store for a lease of ttlMs granted when the database clock read
// now. The clock counts whole milliseconds, truncated: the instant it was read may be up to a
// millisecond past now, so one more is added. The row then stays held until the database
// clock reads past now + 1 + ttlMs, strictly after (read instant + ttl), and so after the
// expires_at reported to the caller, which is measured from before the database was asked.
func expiry(now, ttlMs int64) int64 { return now + 1 + ttlMs }

// ceilMillis is d in whole milliseconds, rounded up: no part of a ttl is dropped.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// placeholderMs is how long a placeholder row is safe from the janitor: its keep-free
// period, but at least a second, which an acquirer between creating the row and taking it
// would have to stall for.
func (b *Backend) placeholderMs() int64 { return max(b.o.keepFree, time.Second).Milliseconds() }

// createRow inserts key's placeholder row unless the key has one. The insert runs on its own
// (see "Deadlocks" in the package doc), so a deadlock victim holds nothing and is run
// again.
func (b *Backend) createRow(ctx context.Context, key string) error {
	return b.d.Retry(ctx, func() error {
		_, err := b.st.insertRow.ExecContext(ctx, b.scope, key, b.placeholderMs())
		return err
	})
}

// missing says what inTx does when the key has no row.
type missing int

const (
	// missingFails makes inTx return errNoRow.
	missingFails missing = iota
	// missingFree hands fn a free row (token 0) that fn must not write back.
	missingFree
	// missingInsert inserts the key's placeholder row first, inside the transaction; only
	// for engines where that cannot deadlock (Dialect.InsertInTx).
	missingInsert
)

// errNoRow is inTx's answer for a key without a row, with missingFails.
var errNoRow = errors.New("sqllock: no row")

// dbError marks a failure of the database inside a transaction, as opposed to a decision
// of the transaction's fn.
type dbError struct{ error }

func (e dbError) Unwrap() error { return e.error }

// inTx runs fn in one transaction that holds key's row lock, and commits when fn returns no
// error; fn returns the row to write back, or nil, and wraps database failures in dbError.
// A transaction chosen as a deadlock victim was rolled back whole and runs again.
func (b *Backend) inTx(ctx context.Context, key string, m missing, fn func(tx *sql.Tx, r row) (*row, error)) error {
	err := b.d.Retry(ctx, func() error { return b.tx(ctx, key, m, fn) })
	if de := (dbError{}); errors.As(err, &de) {
		return lock.Unavailable(ctx, b.d.Name, de.error)
	}
	return err // nil, or fn's decision
}

// tx is one try of inTx: a transaction of its own, or one in a group (see group.go).
func (b *Backend) tx(ctx context.Context, key string, m missing, fn func(tx *sql.Tx, r row) (*row, error)) error {
	if b.group == nil {
		return b.singleTx(ctx, key, m, fn)
	}
	// Without the caller's cancellation: fn writes the caller's variables, so the caller
	// must not return while the group may still run it. A grouped transaction runs to its
	// end like one already sent to the database; the wait is one group at most.
	_, err := b.group.Do(context.WithoutCancel(ctx), txJob{key: key, m: m, fn: fn})
	return err
}

// singleTx runs txBody in a transaction of its own.
func (b *Backend) singleTx(ctx context.Context, key string, m missing, fn func(tx *sql.Tx, r row) (*row, error)) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return dbError{err}
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if err := b.txBody(ctx, tx, key, m, fn); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return dbError{err}
	}
	return nil
}

// txBody is a transaction's work on key's row inside tx: it locks the row (inserting it
// first with missingInsert), runs fn and writes back the row fn returns.
func (b *Backend) txBody(ctx context.Context, tx *sql.Tx, key string, m missing, fn func(tx *sql.Tx, r row) (*row, error)) error {
	if m == missingInsert {
		if _, err := tx.StmtContext(ctx, b.st.insertRow).ExecContext(ctx, b.scope, key, b.placeholderMs()); err != nil {
			return dbError{err}
		}
	}
	r, err := scanRow(tx.StmtContext(ctx, b.st.lockRow).QueryRowContext(ctx, b.scope, key))
	switch {
	case errors.Is(err, sql.ErrNoRows) && m == missingFree:
		r = row{}
	case errors.Is(err, sql.ErrNoRows):
		return errNoRow
	case err != nil:
		return dbError{err}
	}
	next, err := fn(tx, r)
	if err != nil {
		return err
	}
	if next != nil {
		_, err := tx.StmtContext(ctx, b.st.update).ExecContext(ctx,
			next.owner, next.holder, next.holds, next.token, next.expiresAt, next.ttlMs, b.scope, key)
		if err != nil {
			return dbError{err}
		}
	}
	return nil
}

// TryAcquire implements lock.Backend.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Attempt, error) {
	start := time.Now()
	put, err := b.takeSlot(ctx)
	if err != nil {
		return lock.Attempt{}, err
	}
	defer put()
	// Most attempts on a taken lock end here, without a transaction or a row lock.
	r, found, err := b.peek(ctx, key)
	if err != nil {
		return lock.Attempt{}, lock.Unavailable(ctx, b.d.Name, err)
	}
	if found && r.held() && r.owner != owner {
		return lock.Attempt{Holder: r.state()}, nil
	}
	ttlMs := ceilMillis(ttl)
	take := func(tx *sql.Tx, r row) (*row, lock.Attempt, error) {
		if r.held() && r.owner != owner {
			return nil, lock.Attempt{Holder: r.state()}, nil
		}
		return b.grant(ctx, tx, key, owner, r, ttlMs)
	}
	if found && r.token != 0 {
		if att, done, err := b.attemptCAS(ctx, key, r, start, ttl, take); done {
			return att, err
		}
	}
	return b.attempt(ctx, key, found, start, ttl, take)
}

// attemptCAS is attempt by compare-and-set (cas.go) on r, the row a plain read returned,
// which has a token: take gets no transaction and, on such a row, needs none. done false
// means the attempt must run its transaction.
func (b *Backend) attemptCAS(ctx context.Context, key string, r row, start time.Time, ttl time.Duration,
	take func(tx *sql.Tx, r row) (*row, lock.Attempt, error)) (att lock.Attempt, done bool, err error) {
	done, err = b.casDecision(ctx, key, r, func(r row) (*row, error) {
		next, a, err := take(nil, r)
		att = a
		return next, err
	})
	if !done || err != nil {
		return lock.Attempt{}, done, err
	}
	var ended *lock.Expiry
	if att.Acquired {
		ended = endedLease(key, r)
	}
	return b.finishAttempt(att, ended, start, ttl), true, nil
}

// attempt runs one acquire attempt's transaction (take, through takeRow) and finishes it:
// the lease take ran over, if it had run out unreleased, is reported once committed, and a
// granted lease's expiry is measured from start, before the database was asked.
func (b *Backend) attempt(ctx context.Context, key string, found bool, start time.Time, ttl time.Duration,
	take func(tx *sql.Tx, r row) (*row, lock.Attempt, error)) (lock.Attempt, error) {
	var att lock.Attempt
	var ended *lock.Expiry
	err := b.takeRow(ctx, key, found, func(tx *sql.Tx, r row) (*row, error) {
		next, a, err := take(tx, r)
		att, ended = a, nil
		if a.Acquired { // a takeover of r, or a re-entry (endedLease: nil)
			ended = endedLease(key, r)
		}
		return next, err
	})
	if err != nil {
		return lock.Attempt{}, err
	}
	return b.finishAttempt(att, ended, start, ttl), nil
}

// finishAttempt finishes an attempt whose write is committed: it reports the lease taken
// over, if it had run out unreleased, and dates a granted lease from start, before the
// database was asked.
func (b *Backend) finishAttempt(att lock.Attempt, ended *lock.Expiry, start time.Time, ttl time.Duration) lock.Attempt {
	b.report(ended)
	if att.Acquired {
		att.Lease.ExpiresAt = start.Add(ttl)
	}
	return att
}

// takeSlot waits for one of the backend's attempt slots (see OpenMySQL) and returns the
// function that gives it back.
func (b *Backend) takeSlot(ctx context.Context) (put func(), err error) {
	if b.slots == nil {
		return func() {}, nil
	}
	select {
	case b.slots <- struct{}{}:
		return func() { <-b.slots }, nil
	case <-ctx.Done():
		return nil, lock.Unavailable(ctx, b.d.Name, ctx.Err())
	}
}

// grant gives owner the lock in the transaction holding r, key's row: a free, released or
// expired lock is taken over with a new token, one owner holds is re-entered. It returns the
// row to write back and the caller's lease (without ExpiresAt, which the caller measures).
// Only a placeholder row (token 0) needs tx, to read its fence floor; the compare-and-set
// path, which never takes a placeholder, passes none.
func (b *Backend) grant(ctx context.Context, tx *sql.Tx, key, owner string, r row, ttlMs int64) (*row, lock.Attempt, error) {
	if r.held() { // owner's: re-entry
		if r.holds >= lock.MaxHoldCount {
			return nil, lock.Attempt{}, lock.ErrHoldLimit
		}
		att := lock.Attempt{Acquired: true, Lease: lock.Lease{Key: key, Owner: owner, HolderID: r.holder, FencingToken: r.token, HoldCount: r.holds + 1}}
		return &row{owner: owner, holder: r.holder, holds: r.holds + 1, token: r.token, expiresAt: expiry(r.now, ttlMs), ttlMs: ttlMs}, att, nil
	}
	token := r.token + 1
	if r.token == 0 {
		first, err := b.nextToken(ctx, tx, key)
		if err != nil {
			return nil, lock.Attempt{}, dbError{err}
		}
		token = first
	}
	holder := lock.NewHolderID()
	att := lock.Attempt{Acquired: true, Lease: lock.Lease{Key: key, Owner: owner, HolderID: holder, FencingToken: token, HoldCount: 1}}
	return &row{owner: owner, holder: holder, holds: 1, token: token, expiresAt: expiry(r.now, ttlMs), ttlMs: ttlMs}, att, nil
}

// endedLease is the lease r held when it ran out unreleased and unreported (an owner is
// still written, past expires_at), else nil: the transaction that writes over such a row
// reports it once committed, and no other can.
func endedLease(key string, r row) *lock.Expiry {
	if r.owner == "" || r.held() {
		return nil
	}
	return &lock.Expiry{Key: key, FencingToken: r.token, HolderID: r.holder}
}

// report reports e, if any.
func (b *Backend) report(e *lock.Expiry) {
	if e != nil {
		b.Report(*e)
	}
}

// EndExpired implements lock.ExpiryReporter: a row whose lease ran out unreleased is freed
// (as a release frees it) and its lease reported, in one transaction holding the row.
func (b *Backend) EndExpired(ctx context.Context, key string) (lock.State, error) {
	r, found, err := b.peek(ctx, key)
	switch {
	case err != nil:
		return lock.State{}, lock.Unavailable(ctx, b.d.Name, err)
	case !found || r.held() || r.owner == "":
		return r.state(), nil // nothing ran out unreported: no transaction
	}
	var st lock.State
	var ended *lock.Expiry
	err = b.inTx(ctx, key, missingFree, func(_ *sql.Tx, r row) (*row, error) {
		st, ended = r.state(), endedLease(key, r)
		if ended == nil {
			return nil, nil
		}
		return &row{token: r.token, expiresAt: r.now + b.o.keepFree.Milliseconds()}, nil
	})
	if err != nil {
		return lock.State{}, err
	}
	b.report(ended)
	return st, nil
}

// takeRow runs take in a transaction that holds key's row, creating the row first when the
// key has none (found false).
//
// The row may be deleted between the read that found it and the transaction (a free row
// past its keep-free period), or, rarely, between a separate insert and the transaction: a
// placeholder is kept for at least a second, so another acquirer must have taken it,
// released it and seen it reclaimed meanwhile. Each round that finds no row is such progress
// of others; the rounds are bounded in case a caller without a deadline is unlucky forever.
func (b *Backend) takeRow(ctx context.Context, key string, found bool, take func(tx *sql.Tx, r row) (*row, error)) error {
	for round := 1; ; round++ {
		m := missingFails
		switch {
		case found:
		case b.d.InsertInTx:
			m = missingInsert
		default:
			if err := b.createRow(ctx, key); err != nil {
				return lock.Unavailable(ctx, b.d.Name, err)
			}
		}
		err := b.inTx(ctx, key, m, take)
		if !errors.Is(err, errNoRow) {
			return err
		}
		if round == 100 {
			return lock.Unavailable(ctx, b.d.Name, fmt.Errorf("row of key %q deleted before each of %d transactions", key, round))
		}
		found = false
	}
}

// Release implements lock.Backend.
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) (uint32, lock.Released, error) {
	var remaining uint32
	var lease lock.Released
	err := b.change(ctx, key, func(r row) (*row, error) {
		if err := ownedBy(r, owner); err != nil {
			return nil, err
		}
		if token != 0 && r.token != token {
			return nil, lock.ErrNotHeld
		}
		remaining, lease = r.holds-1, lock.Released{FencingToken: r.token, HolderID: r.holder}
		if remaining == 0 {
			// Free; the token stays for the next holder, and the janitor deletes the row
			// (folding the token into the fence floor) once the keep-free period passes.
			return &row{token: r.token, expiresAt: r.now + b.o.keepFree.Milliseconds()}, nil
		}
		return &row{owner: owner, holder: r.holder, holds: remaining, token: r.token, expiresAt: r.expiresAt, ttlMs: r.ttlMs}, nil
	})
	if err != nil { // decide may have run on a read the write then missed
		return 0, lock.Released{}, err
	}
	return remaining, lease, nil
}

// Renew implements lock.Backend.
func (b *Backend) Renew(ctx context.Context, key, owner string, ttl time.Duration) (lock.Lease, error) {
	start := time.Now()
	var lease lock.Lease
	err := b.change(ctx, key, func(r row) (*row, error) {
		if err := ownedBy(r, owner); err != nil {
			return nil, err
		}
		ttlMs, report := ceilMillis(ttl), ttl
		if ttl <= 0 { // the lease's own ttl
			ttlMs, report = r.ttlMs, time.Duration(r.ttlMs)*time.Millisecond
		}
		lease = lock.Lease{Key: key, Owner: owner, HolderID: r.holder, FencingToken: r.token, HoldCount: r.holds, ExpiresAt: start.Add(report)}
		return &row{owner: owner, holder: r.holder, holds: r.holds, token: r.token, expiresAt: expiry(r.now, ttlMs), ttlMs: ttlMs}, nil
	})
	if err != nil {
		return lock.Lease{}, err
	}
	return lease, nil
}

// change runs decide on key's row and writes back the row it returns: by compare-and-set
// on a plain read of the row (cas.go), or, when the row changed meanwhile, in a transaction
// holding the row. A key without a row is handed to decide as a free row (token 0), and
// nothing is written for it.
func (b *Backend) change(ctx context.Context, key string, decide func(r row) (*row, error)) error {
	r, found, err := b.peek(ctx, key)
	if err != nil {
		return lock.Unavailable(ctx, b.d.Name, err)
	}
	if found {
		if done, err := b.casDecision(ctx, key, r, decide); done {
			return err
		}
	}
	return b.inTx(ctx, key, missingFree, func(_ *sql.Tx, r row) (*row, error) { return decide(r) })
}

// Inspect implements lock.Backend.
func (b *Backend) Inspect(ctx context.Context, key string) (lock.State, error) {
	r, _, err := b.peek(ctx, key)
	if err != nil {
		return lock.State{}, lock.Unavailable(ctx, b.d.Name, err)
	}
	return r.state(), nil
}

func ownedBy(r row, owner string) error {
	switch {
	case !r.held():
		return lock.ErrNotHeld
	case r.owner != owner:
		return lock.ErrNotOwner
	}
	return nil
}
