package sqllock

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// reclaimBatch is how many rows one janitor transaction deletes at most: few enough that the
// row locks it holds (on keys nobody holds) are held for a few round trips only.
const reclaimBatch = 64

// Reclaim deletes the scope's reclaimable rows (expired leases, free rows past their
// keep-free period, abandoned placeholders, fair waiters' entries long lapsed), raising the
// fence floors, and returns how many
// it deleted. It runs batches until one finds fewer than a batch, and is safe to run from
// several backends at once. The backend's janitor calls it every reclaim interval.
func (b *Backend) Reclaim(ctx context.Context) (int, error) {
	if err := b.d.Retry(ctx, func() error { return b.reclaimLines(ctx) }); err != nil {
		return 0, lock.Unavailable(ctx, b.d.Name, err)
	}
	total := 0
	for {
		var n, candidates int
		err := b.d.Retry(ctx, func() (err error) { // a victim was rolled back whole
			n, candidates, err = b.reclaimBatch(ctx)
			return err
		})
		total += n
		switch {
		case err != nil:
			return total, lock.Unavailable(ctx, b.d.Name, err)
		case candidates < reclaimBatch || n == 0:
			return total, nil
		}
	}
}

// reclaimBatch finds up to reclaimBatch candidates with a plain read (locking nothing), then
// in one transaction locks those rows in key order with one statement, checks each again
// (another janitor may have deleted it, a holder may have taken it since), deletes the ones
// still reclaimable and raises their buckets' floors, in bucket order.
func (b *Backend) reclaimBatch(ctx context.Context) (deleted, candidates int, err error) {
	rows, err := b.db.QueryContext(ctx, "SELECT lock_key FROM "+leasesTable+
		" WHERE scope = ? AND expires_at <= "+b.d.NowMillis+" ORDER BY expires_at LIMIT ?", b.scope, reclaimBatch)
	if err != nil {
		return 0, 0, err
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return 0, 0, err
		}
		keys = append(keys, k)
	}
	if err := rows.Close(); err != nil {
		return 0, 0, err
	}
	if err := rows.Err(); err != nil || len(keys) == 0 {
		return 0, 0, err
	}
	slices.Sort(keys)

	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, len(keys), err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	in := "(" + strings.Repeat("?, ", len(keys)-1) + "?)"
	args := make([]any, 0, len(keys)+1)
	args = append(args, b.scope)
	for _, k := range keys {
		args = append(args, k)
	}
	locked, err := tx.QueryContext(ctx, "SELECT lock_key, owner, holder_id, fencing_token, expires_at, "+b.d.NowMillis+
		" FROM "+leasesTable+" WHERE scope = ? AND lock_key IN "+in+" ORDER BY lock_key"+b.d.ForUpdate, args...)
	if err != nil {
		return 0, len(keys), err
	}
	var (
		gone   = []any{b.scope}
		floors = map[int64]uint64{}
		ended  []*lock.Expiry // leases that ran out unreleased and unreported
	)
	for locked.Next() {
		var r row
		var k string
		if err := locked.Scan(&k, &r.owner, &r.holder, &r.token, &r.expiresAt, &r.now); err != nil {
			locked.Close()
			return 0, len(keys), err
		}
		if r.expiresAt > r.now {
			continue // taken, renewed or released again since the candidates were read
		}
		token := r.token
		if e := endedLease(k, r); e != nil {
			ended = append(ended, e)
		}
		gone = append(gone, k)
		if bucket := bucketOf(k); token > 0 && token > floors[bucket] {
			floors[bucket] = token
		}
	}
	if err := locked.Close(); err != nil {
		return 0, len(keys), err
	}
	if err := locked.Err(); err != nil {
		return 0, len(keys), err
	}
	n := len(gone) - 1
	if n == 0 {
		return 0, len(keys), nil
	}
	del := "DELETE FROM " + leasesTable + " WHERE scope = ? AND lock_key IN (" + strings.Repeat("?, ", n-1) + "?)"
	if _, err := tx.ExecContext(ctx, del, gone...); err != nil {
		return 0, len(keys), err
	}
	if err := b.raiseFloors(ctx, tx, floors); err != nil {
		return 0, len(keys), err
	}
	if err := tx.Commit(); err != nil {
		return 0, len(keys), err
	}
	for _, e := range ended {
		b.report(e)
	}
	return n, len(keys), nil
}

// runJanitor calls Reclaim every reclaim interval until ctx ends, logging when it starts
// failing and when it recovers (not every failed pass of an outage).
func (b *Backend) runJanitor(ctx context.Context) {
	defer close(b.janitorDone)
	if b.o.interval <= 0 {
		return
	}
	t := time.NewTicker(b.o.interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := b.Reclaim(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			b.o.logger.Warn("sqllock: janitor failed; free rows stay until it succeeds", "backend", b.d.Name, "scope", b.scope, "error", err)
		case err == nil && failing:
			b.o.logger.Info("sqllock: janitor recovered", "backend", b.d.Name, "scope", b.scope)
		}
		failing = err != nil
	}
}
