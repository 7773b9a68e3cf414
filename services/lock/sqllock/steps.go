package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// Batches as set statements. A batch's steps (lock.BatchBackend) run in a few transactions
// instead of one each: their keys, sorted, are cut into chunks of up to stepChunk keys, and
// each chunk is one transaction that reads every row of its keys with one locking read (in
// key order, the order every transaction here locks several key rows in), decides every step
// in Go with the single calls' own decisions (decide.go), and writes the rows that changed
// back with one multi-row upsert. The steps on one key are decided in batch order, each on
// the row the one before it left, so a batch means what its steps one after another would
// mean. A key that acquires gets its placeholder row as the single path gets it: inside the
// transaction where that cannot deadlock (Dialect.InsertInTx); on MySQL on its own, so a
// chunk that finds keys without rows rolls back, inserts their rows (one INSERT IGNORE for
// all of them, in key order) and runs again. A key still without a row after a few rounds
// (the janitor deleting it each time) runs its steps through the single calls once the batch
// is done, in order. Leases taken over after they ran out are reported once the chunk
// commits, as a single attempt reports them. Fair mode's lines of waiters play no part: a
// batched acquire cannot wait, and an attempt that does not wait is a TryAcquire, which
// reads no line (fair.go), batched or not.

// stepChunk caps the keys of one transaction: its statements stay far below every engine's
// limit on parameters (8 per row written), and its row locks few enough to be held briefly.
// A power of two: the longest padded list of stepsql.go.
const (
	stepChunkLog = 9
	stepChunk    = 1 << stepChunkLog
)

var _ lock.BatchBackend = (*Backend)(nil)

// keySteps are a batch's steps on one key, in batch order.
type keySteps struct {
	key      string
	steps    []*lock.Step
	acquires bool // some step is a TryAcquire: the key needs a row
}

// RunSteps implements lock.BatchBackend.
func (b *Backend) RunSteps(ctx context.Context, steps []*lock.Step) {
	start := time.Now() // before anything is sent: leases end no earlier than start + ttl
	byKey := make(map[string]*keySteps)
	var keys []*keySteps
	for _, st := range steps {
		if st.Kind < lock.StepTryAcquire || st.Kind > lock.StepInspect {
			panic(fmt.Sprintf("sqllock: step of unknown kind %d", st.Kind))
		}
		ks := byKey[st.Key]
		if ks == nil {
			ks = &keySteps{key: st.Key}
			byKey[st.Key] = ks
			keys = append(keys, ks)
		}
		ks.steps = append(ks.steps, st)
		ks.acquires = ks.acquires || st.Kind == lock.StepTryAcquire
	}
	slices.SortFunc(keys, func(x, y *keySteps) int { return strings.Compare(x.key, y.key) })
	alone, err := b.runChunks(ctx, start, keys)
	if err != nil {
		for _, st := range steps {
			st.Err = err
		}
		return
	}
	for _, ks := range alone { // after the slot is given back: each single call takes one
		for _, st := range ks.steps {
			clearResults(st)
			b.runStep(ctx, st)
		}
	}
}

// runChunks runs the chunks of keys one after another, on one of the backend's attempt
// slots (see takeSlot), and returns the keys left to the single calls.
func (b *Backend) runChunks(ctx context.Context, start time.Time, keys []*keySteps) ([]*keySteps, error) {
	put, err := b.takeSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer put()
	var alone []*keySteps
	for chunk := range slices.Chunk(keys, stepChunk) {
		alone = append(alone, b.runChunk(ctx, start, chunk)...)
	}
	return alone, nil
}

// runChunk runs the steps on chunk's keys in one transaction (see above), but for those of
// the keys it returns, which are left to the single calls.
func (b *Backend) runChunk(ctx context.Context, start time.Time, chunk []*keySteps) []*keySteps {
	var c chunkRun
	run := func() error {
		return b.d.Retry(ctx, func() error {
			c = chunkRun{start: start, keepFreeMs: b.o.keepFree.Milliseconds(), createRounds: c.createRounds}
			return b.chunkTx(ctx, &c, chunk)
		})
	}
	err := run()
	for err == nil && len(c.create) > 0 { // MySQL: create the missing rows on their own, then again
		c.createRounds++
		if err = b.createRows(ctx, c.create); err == nil {
			err = run()
		}
	}
	if err != nil {
		err = lock.Unavailable(ctx, b.d.Name, err)
		for _, ks := range chunk {
			for _, st := range ks.steps {
				clearResults(st)
				st.Err = err
			}
		}
		return nil
	}
	for _, e := range c.ended {
		b.Report(e)
	}
	return c.alone
}

// createRows creates the placeholder rows of keys on their own, outside any transaction, in
// key order, where inserting inside the transaction could deadlock (see "Deadlocks" in the
// package doc).
func (b *Backend) createRows(ctx context.Context, keys []string) error {
	if err := b.prepareSteps(ctx, len(keys)); err != nil {
		return err
	}
	return b.d.Retry(ctx, func() error {
		return b.setExec(ctx, nil, stmtInsertRows, b.placeholderRows(keys), true, b.insertRowsSQL)
	})
}

// placeholderRows are the insertRowsSQL rows of keys.
func (b *Backend) placeholderRows(keys []string) [][]any {
	rows := make([][]any, len(keys))
	for i, k := range keys {
		rows[i] = []any{b.scope, k, b.placeholderMs()}
	}
	return rows
}

// chunkRun is what one try of a chunk's transaction decided beyond its steps' results.
type chunkRun struct {
	start      time.Time
	keepFreeMs int64
	ended      []lock.Expiry // leases taken over after they ran out, to report once committed
	alone      []*keySteps   // keys without a row: their steps run through the single calls
	// create are the keys whose rows must be created before the chunk runs again (the
	// transaction rolled back); createRounds counts how often that happened.
	create       []string
	createRounds int
}

// maxCreateRounds is how often a chunk creates missing rows and runs again before the keys
// still without one (the janitor deleting them each time) run through the single calls.
const maxCreateRounds = 3

// chunkTx is one try of a chunk's transaction: it sets every step's results, but for the
// keys it leaves to the single calls (c.alone) and, when it rolls back for rows to create
// first (c.create), for any.
func (b *Backend) chunkTx(ctx context.Context, c *chunkRun, chunk []*keySteps) error {
	if err := b.prepareSteps(ctx, len(chunk)); err != nil {
		return err
	}
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if b.d.InsertInTx {
		var keys []string
		for _, ks := range chunk {
			if ks.acquires {
				keys = append(keys, ks.key)
			}
		}
		if len(keys) > 0 {
			if err := b.setExec(ctx, tx, stmtInsertRows, b.placeholderRows(keys), true, b.insertRowsSQL); err != nil {
				return err
			}
		}
	}
	rows, err := b.lockRows(ctx, tx, chunk)
	if err != nil {
		return err
	}
	var live []*keySteps
	for _, ks := range chunk {
		switch _, found := rows[ks.key]; {
		case found || !ks.acquires:
			live = append(live, ks)
		case !b.d.InsertInTx && c.createRounds < maxCreateRounds:
			c.create = append(c.create, ks.key)
		default:
			c.alone = append(c.alone, ks)
		}
	}
	if len(c.create) > 0 {
		return nil // rolled back: nothing was decided
	}
	floors, err := b.lockFloors(ctx, tx, live, rows)
	if err != nil {
		return err
	}
	var changed [][]any
	for _, ks := range live {
		floor, hasFloor := floors[bucketOf(ks.key)]
		if r, wrote := c.decide(ctx, b.d.Name, ks, rows[ks.key], floor, hasFloor); wrote {
			changed = append(changed, []any{b.scope, ks.key, r.owner, r.holder, r.holds, r.token, r.expiresAt, r.ttlMs})
		}
	}
	if len(changed) > 0 {
		if err := b.setExec(ctx, tx, stmtUpsertRows, changed, b.padUpserts(), b.upsertRowsSQL); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// decide decides ks's steps in order on r, key's row as locked, each on the row the step
// before it left; it returns the row to write back and whether there is one. floor is the
// key's fence floor, when hasFloor, for its first token.
func (c *chunkRun) decide(ctx context.Context, engine string, ks *keySteps, r row, floor uint64, hasFloor bool) (row, bool) {
	wrote := false
	for _, st := range ks.steps {
		clearResults(st)
		var next *row
		switch st.Kind {
		case lock.StepTryAcquire:
			var first uint64
			if needsFirstToken(r) {
				if !hasFloor {
					st.Err = lock.Unavailable(ctx, engine, fmt.Errorf("%w: bucket %d", errNoFloor, bucketOf(ks.key)))
					continue
				}
				first = floor + 1
			}
			next, st.Attempt, st.Err = decideTake(ks.key, st.Owner, r, ceilMillis(st.TTL), first)
			if st.Attempt.Acquired {
				if e := endedLease(ks.key, r); e != nil {
					c.ended = append(c.ended, *e)
				}
				st.Attempt.Lease.ExpiresAt = c.start.Add(st.TTL)
			}
		case lock.StepRelease:
			next, st.Remaining, st.Released, st.Err = decideRelease(r, st.Owner, st.Token, c.keepFreeMs)
		case lock.StepRenew:
			next, st.Lease, st.Err = decideRenew(ks.key, st.Owner, st.TTL, c.start, r)
		case lock.StepInspect:
			st.State = r.state()
		}
		if next != nil { // the next step decides on this one's row, at the same clock
			now := r.now
			r = *next
			r.now, wrote = now, true
		}
	}
	return r, wrote
}

// clearResults forgets a step's results of an earlier try.
func clearResults(st *lock.Step) {
	st.Attempt, st.Remaining, st.Released, st.Lease, st.State, st.Err = lock.Attempt{}, 0, lock.Released{}, lock.Lease{}, lock.State{}, nil
}

// runStep runs st through its single call.
func (b *Backend) runStep(ctx context.Context, st *lock.Step) {
	switch st.Kind {
	case lock.StepTryAcquire:
		st.Attempt, st.Err = b.TryAcquire(ctx, st.Key, st.Owner, st.TTL)
	case lock.StepRelease:
		st.Remaining, st.Released, st.Err = b.Release(ctx, st.Key, st.Owner, st.Token)
	case lock.StepRenew:
		st.Lease, st.Err = b.Renew(ctx, st.Key, st.Owner, st.TTL)
	case lock.StepInspect:
		st.State, st.Err = b.Inspect(ctx, st.Key)
	}
}

// lockRows reads and locks the rows of chunk's keys, in key order, with one statement.
func (b *Backend) lockRows(ctx context.Context, tx *sql.Tx, chunk []*keySteps) (map[string]row, error) {
	keys := make([][]any, len(chunk))
	for i, ks := range chunk {
		keys[i] = []any{ks.key}
	}
	rs, err := b.setQuery(ctx, tx, stmtLockRows, []any{b.scope}, keys)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	rows := make(map[string]row, len(chunk))
	for rs.Next() {
		var k string
		var r row
		if err := rs.Scan(&k, &r.owner, &r.holder, &r.holds, &r.token, &r.expiresAt, &r.ttlMs, &r.now); err != nil {
			return nil, err
		}
		rows[k] = r
	}
	return rows, rs.Err()
}

// lockFloors reads and locks, in bucket order with one statement, the fence floors of the
// keys of chunk that acquire a placeholder row (token 0), for their first tokens. A bucket
// whose floor is missing is absent from the answer.
func (b *Backend) lockFloors(ctx context.Context, tx *sql.Tx, chunk []*keySteps, rows map[string]row) (map[int64]uint64, error) {
	var buckets []int64
	for _, ks := range chunk {
		if r, ok := rows[ks.key]; ok && ks.acquires && needsFirstToken(r) {
			buckets = append(buckets, bucketOf(ks.key))
		}
	}
	if len(buckets) == 0 {
		return nil, nil
	}
	slices.Sort(buckets)
	buckets = slices.Compact(buckets)
	args := make([][]any, len(buckets))
	for i, bk := range buckets {
		args[i] = []any{bk}
	}
	rs, err := b.setQuery(ctx, tx, stmtLockFloors, []any{b.scope}, args)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	floors := make(map[int64]uint64, len(buckets))
	for rs.Next() {
		var bk int64
		var floor uint64
		if err := rs.Scan(&bk, &floor); err != nil {
			return nil, err
		}
		floors[bk] = floor
	}
	return floors, rs.Err()
}
