package sqltask

import (
	"context"
	"database/sql"
	"slices"
	"strconv"

	"github.com/coordkit/coordkit/services/taskpick"
)

// lockUniqueKeys makes sure every unique key of tasks has its row in uniqueTable and locks
// those rows for the rest of the transaction, in key order: two Puts of overlapping keys
// then wait for each other instead of deadlocking, and concurrent Puts of one key from any
// number of instances run one after the other. It reports whether it locked any. The row of a key never used before starts
// free (task_seq 0, which no task has). Every engine's upsert locks the row it finds: MySQL's
// ON DUPLICATE KEY UPDATE and PostgreSQL's ON CONFLICT DO UPDATE take it exclusively (never
// a shared lock that two Puts would both hold and then both want to upgrade), and SQLite's
// write transaction holds the whole file.
func (b *Backend) lockUniqueKeys(ctx context.Context, tx *sql.Tx, pool string, tasks []taskpick.NewTask) (locked bool, err error) {
	var keys []string
	for _, t := range tasks {
		if t.UniqueKey != "" {
			keys = append(keys, t.UniqueKey)
		}
	}
	if len(keys) == 0 {
		return false, nil
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	up := tx.StmtContext(ctx, b.st.uniqueLock)
	for _, k := range keys {
		if _, err := up.ExecContext(ctx, pool, k); err != nil {
			return false, err
		}
	}
	return true, nil
}

// uniqueLockQuery is the upsert of lockUniqueKeys.
func uniqueLockQuery(dialect string) string {
	ins := "INSERT INTO " + uniqueTable + " (pool, ukey, id, task_seq, scope, until_ms) VALUES (?, ?, '', 0, 0, 0)"
	switch dialect {
	case "mysql":
		return ins + " ON DUPLICATE KEY UPDATE task_seq = task_seq"
	case "postgres":
		return ins + " ON CONFLICT (pool, ukey) DO UPDATE SET task_seq = " + uniqueTable + ".task_seq"
	}
	return ins + " ON CONFLICT (pool, ukey) DO NOTHING"
}

// holder is a unique key's holder as a Put sees it.
type holder struct {
	held  bool
	id    string
	state taskpick.State
	gone  bool // the holding task no longer exists (a period key outlives it)
}

// uniqueHolder reads who holds key, whose row lockUniqueKeys locked: the task that claimed it
// last, if its scope still holds (taskpick.UniqueScope.Holds on the task's row of that seq,
// or a period that has not ended by now). The key's row is read locking (it is locked
// already); the task's as last committed (putTxOptions), without a lock that a Pick or Ack of
// it would wait for.
func (b *Backend) uniqueHolder(ctx context.Context, tx *sql.Tx, pool, key string, now int64) (holder, error) {
	var h holder
	var seq, until int64
	var scope int
	if err := tx.StmtContext(ctx, b.st.uniqueRead).QueryRowContext(ctx, pool, key).Scan(&h.id, &seq, &scope, &until); err != nil {
		return h, err
	}
	if seq == 0 {
		return h, nil
	}
	var st, attempt uint32
	var runAt int64
	exists := true
	switch err := tx.StmtContext(ctx, b.st.uniqueTask).QueryRowContext(ctx, seq, pool, h.id).Scan(&st, &runAt, &attempt); err {
	case nil:
		h.state = stateOf(st, runAt, now)
	case sql.ErrNoRows:
		exists, h.gone = false, true
	default:
		return h, err
	}
	if s := taskpick.UniqueScope(scope); s == taskpick.UniquePeriodScope {
		h.held = until > now
	} else {
		h.held = s.Holds(exists, h.state, attempt)
	}
	return h, nil
}

// stateOf maps a stored state to taskpick's.
func stateOf(st uint32, runAt, now int64) taskpick.State {
	switch st {
	case stAvailable:
		if runAt > now {
			return taskpick.Delayed
		}
		return taskpick.Available
	case stLeased:
		return taskpick.Leased
	case stDead:
		return taskpick.Dead
	case stCancelled:
		return taskpick.Cancelled
	}
	return taskpick.Done
}

// claimUnique makes the task just inserted the holder of its key.
func (b *Backend) claimUnique(ctx context.Context, tx *sql.Tx, pool string, t taskpick.NewTask, now int64) error {
	var seq int64
	if err := tx.StmtContext(ctx, b.st.uniqueSeq).QueryRowContext(ctx, pool, t.ID).Scan(&seq); err != nil {
		return err
	}
	var until int64
	if t.UniqueScope == taskpick.UniquePeriodScope {
		until = now + 1 + ceilMillis(t.UniquePeriod)
	}
	_, err := tx.StmtContext(ctx, b.st.uniqueClaim).ExecContext(ctx, t.ID, seq, int(t.UniqueScope), until, pool, t.UniqueKey)
	return err
}

// uniqueStatements are the statements of unique puts, prepared with the others.
func uniqueStatements(s *statements, d string, forUpdate string) []stmtText {
	return []stmtText{
		{&s.uniqueLock, uniqueLockQuery(d)},
		{&s.uniqueRead, "SELECT id, task_seq, scope, until_ms FROM " + uniqueTable + " WHERE pool = ? AND ukey = ?" + forUpdate},
		// The id too: a seq is never reused by SQLite (AUTOINCREMENT), PostgreSQL (identity)
		// or MySQL 8 / MariaDB 10.2.4+, but older InnoDB could after a restart.
		{&s.uniqueTask, "SELECT state, run_at, attempt FROM " + table + " WHERE seq = ? AND pool = ? AND id = ?"},
		{&s.uniqueSeq, "SELECT seq FROM " + table + " WHERE pool = ? AND id = ?"},
		{&s.uniqueClaim, "UPDATE " + uniqueTable + " SET id = ?, task_seq = ?, scope = ?, until_ms = ? WHERE pool = ? AND ukey = ?"},
	}
}

// purgeUnique deletes rows of uniqueTable whose key is free for good: a period that ended,
// or a queued or active key whose task row is gone (acked, purged, or never inserted). It
// reads up to limit rows from where the last call stopped, so every row is visited in turn
// at a bounded cost per sweep, and deletes each only if it still names the same task seq:
// a Put that claimed the key meanwhile gave it a new one.
func (b *Backend) purgeUnique(ctx context.Context, limit int) error {
	b.mu.Lock()
	pool, key := b.uniqueCursor[0], b.uniqueCursor[1]
	b.mu.Unlock()
	rows, err := b.db.QueryContext(ctx, "SELECT u.pool, u.ukey, u.task_seq, u.scope, u.until_ms, t.seq IS NULL, "+b.d.NowMillis+
		" FROM "+uniqueTable+" u LEFT JOIN "+table+" t ON t.seq = u.task_seq AND t.pool = u.pool AND t.id = u.id"+
		" WHERE u.pool > ? OR (u.pool = ? AND u.ukey > ?) ORDER BY u.pool, u.ukey LIMIT ?", pool, pool, key, limit)
	if err != nil {
		return err
	}
	type row struct {
		pool, key string
		seq       int64
	}
	var free []row
	n := 0
	for rows.Next() {
		var r row
		var scope int
		var until, now int64
		var gone bool
		if err := rows.Scan(&r.pool, &r.key, &r.seq, &scope, &until, &gone, &now); err != nil {
			rows.Close()
			return err
		}
		n++
		pool, key = r.pool, r.key
		if (scope == int(taskpick.UniquePeriodScope) && until <= now) || (scope != int(taskpick.UniquePeriodScope) && gone) {
			free = append(free, r)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if n < limit {
		pool, key = "", "" // the end: start again from the first row
	}
	b.mu.Lock()
	b.uniqueCursor = [2]string{pool, key}
	b.mu.Unlock()
	for _, r := range free {
		err := b.d.Retry(ctx, func() error {
			_, err := b.db.ExecContext(ctx, "DELETE FROM "+uniqueTable+" WHERE pool = ? AND ukey = ? AND task_seq = ? AND (scope <> "+
				strconv.Itoa(int(taskpick.UniquePeriodScope))+" OR until_ms <= "+b.d.NowMillis+")", r.pool, r.key, r.seq)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
