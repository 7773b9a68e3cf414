package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
)

// FenceBuckets is how many fence floors each scope has. A key's bucket is fixed by
// FNV-1a-32(key) mod FenceBuckets; changing either would move keys to buckets whose floor
// never saw their tokens, so both are part of the storage format.
const FenceBuckets = 1024

// bucketOf is key's fence bucket.
func bucketOf(key string) int64 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int64(h.Sum32() % FenceBuckets)
}

// errNoFloor means the scope's fence floors are missing: someone deleted them (DropScope)
// under a running backend. Handing out a first token from nothing could repeat one.
var errNoFloor = errors.New("sqllock: fence floor missing")

// nextToken is the first fencing token of a new row of key: its bucket's floor + 1. The
// floor row is read with a locking read, so a concurrent deletion in the bucket (which raises
// the floor in its own transaction) is either wholly before this read or waits for this
// transaction to end; the floor is not raised here, because a row's tokens stay above its
// first one while it lives and are folded into the floor when it is deleted.
func (b *Backend) nextToken(ctx context.Context, tx *sql.Tx, key string) (uint64, error) {
	var floor uint64
	err := tx.StmtContext(ctx, b.st.lockFloor).QueryRowContext(ctx, b.scope, bucketOf(key)).Scan(&floor)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("%w: scope %q, bucket %d", errNoFloor, b.scope, bucketOf(key))
	case err != nil:
		return 0, err
	}
	return floor + 1, nil
}

// raiseFloors raises the floor of each bucket to at least its token, in one statement, which
// locks the floor rows in bucket order (every transaction that locks several floors takes
// them in that order).
func (b *Backend) raiseFloors(ctx context.Context, tx *sql.Tx, tokens map[int64]uint64) error {
	if len(tokens) == 0 {
		return nil
	}
	buckets := slices.Sorted(maps.Keys(tokens))
	q := []byte("UPDATE " + fencesTable + " SET fence_floor = CASE")
	args := make([]any, 0, 4*len(buckets)+1)
	for _, bucket := range buckets {
		q = append(q, " WHEN bucket = ? AND fence_floor < ? THEN ?"...)
		args = append(args, bucket, tokens[bucket], tokens[bucket])
	}
	q = append(q, " ELSE fence_floor END WHERE scope = ? AND bucket IN ("...)
	args = append(args, b.scope)
	for i, bucket := range buckets {
		if i > 0 {
			q = append(q, ", "...)
		}
		q = append(q, '?')
		args = append(args, bucket)
	}
	q = append(q, ')')
	_, err := tx.ExecContext(ctx, string(q), args...)
	return err
}

// seedFences creates scope's fence floors if they are missing, inside tx. A scope new to
// these tables whose locks lived in the table of earlier versions (coordkit_locks) starts
// every floor at that table's highest token, so no key's token can go back; it reports
// whether it created them (and so must migrate the old table's live leases).
func (b *Backend) seedFences(ctx context.Context, tx *sql.Tx, legacy bool) (created bool, err error) {
	var floor uint64
	if legacy {
		var max sql.NullInt64
		q := "SELECT MAX(fencing_token) FROM " + legacyTable + " WHERE scope = ?"
		if err := tx.QueryRowContext(ctx, q, b.scope).Scan(&max); err != nil {
			return false, err
		}
		floor = uint64(max.Int64)
	}
	// One statement, buckets in ascending order: two instances starting at once queue on
	// bucket 0 and the second inserts nothing.
	q := []byte(b.d.InsertIgnore + " INTO " + fencesTable + " (scope, bucket, fence_floor) VALUES ")
	for i := range FenceBuckets {
		if i > 0 {
			q = append(q, ',')
		}
		q = fmt.Appendf(q, "(?, %d, %d)", i, floor)
	}
	q = append(q, b.d.OnConflictIgnore...)
	args := make([]any, FenceBuckets)
	for i := range args {
		args[i] = b.scope
	}
	res, err := tx.ExecContext(ctx, string(q), args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == FenceBuckets, err
}
