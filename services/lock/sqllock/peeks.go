package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/coordkit/coordkit/libs/client/batch"
)

// Batched plain reads. Most operations begin with a plain read of their key's row (peek):
// every attempt, Release and Renew (cas.go), and Inspect. The reads that callers
// start while others are in flight go out together, through a batch.Coalescer, as one SELECT
// of up to peekBatch keys: one round trip, and one statement for the database, instead of
// one each. A read started while few are in flight goes out at once, alone, as before. A
// batched read is one consistent read, made after each of its callers began, so it answers
// each of them as its own read would have.

const (
	// peekBatch caps the keys of one batched read.
	peekBatch = 16
	// peeksInFlight is how many reads run at once before further ones wait to be batched.
	peeksInFlight = 2
)

// peeked is one key's answer of a batched read.
type peeked struct {
	r     row
	found bool
}

// startPeeks turns batched reads on.
func (b *Backend) startPeeks() {
	b.peeks = batch.New(b.runPeeks, batch.Config{MaxInFlight: peeksInFlight, MaxBatch: peekBatch})
}

// peek reads key's row without locking anything.
func (b *Backend) peek(ctx context.Context, key string) (r row, found bool, err error) {
	p, err := b.peeks.Do(ctx, key)
	return p.r, p.found, err
}

// peekOne reads key's row alone.
func (b *Backend) peekOne(ctx context.Context, key string) (r row, found bool, err error) {
	r, err = scanRow(b.st.peekRow.QueryRowContext(ctx, b.scope, key))
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	return r, err == nil, err
}

// runPeeks reads the rows of keys, which may repeat, with one statement.
func (b *Backend) runPeeks(ctx context.Context, keys []string) ([]batch.Result[peeked], error) {
	out := make([]batch.Result[peeked], len(keys))
	if len(keys) == 1 {
		r, found, err := b.peekOne(ctx, keys[0])
		out[0] = batch.Result[peeked]{Value: peeked{r, found}, Err: err}
		return out, nil
	}
	args := make([]any, 1, peekBatch+1)
	args[0] = b.scope
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			args = append(args, k)
		}
	}
	// The IN list has batchRows' length, the last key repeated to fill it.
	n := batchRows(len(args) - 1)
	for len(args)-1 < n {
		args = append(args, args[len(args)-1])
	}
	st, err := b.st.peekMany(ctx, b.db, b.d, n)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[string]row, len(args)-1)
	for rows.Next() {
		var k string
		var r row
		if err := rows.Scan(&k, &r.owner, &r.holder, &r.holds, &r.token, &r.expiresAt, &r.ttlMs, &r.now); err != nil {
			return nil, err
		}
		found[k] = r
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i, k := range keys {
		r, ok := found[k]
		out[i].Value = peeked{r, ok}
	}
	return out, nil
}

// peekManySQL is the batched read of n keys.
func peekManySQL(d Dialect, n int) string {
	return "SELECT lock_key, " + rowColumns(d) + " FROM " + leasesTable +
		" WHERE scope = ? AND lock_key IN (?" + strings.Repeat(", ?", n-1) + ")"
}
