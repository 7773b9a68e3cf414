package sqllock

import (
	"context"
	"database/sql"
	"math/bits"
	"strings"
	"sync"
)

// The set statements of a batch's chunks (steps.go). Each takes a list of rows, padded to a
// power-of-two length with its last row repeated, and is prepared once per backend and
// length: the MySQL driver otherwise prepares, executes and closes each statement, and the
// server parses a statement of a few thousand parameters twice. Padding is harmless for each of them (a key listed twice is read, locked or
// inserted once), but for PostgreSQL's upsert, which refuses to change one row twice, and
// so is sent unpadded there (its driver caches what it prepares by text anyway).

// stepStmt names a set statement.
type stepStmt uint8

const (
	stmtLockRows   stepStmt = iota // the locking read of a chunk's rows, in key order
	stmtLockFloors                 // the locking read of fence floors, in bucket order
	stmtInsertRows                 // the placeholder rows of keys without one
	stmtUpsertRows                 // the write-back of changed rows
	stepStmts
)

// stepStatements are a backend's prepared set statements, by statement and padded length
// (log2), prepared before the first chunk that needs them.
type stepStatements struct {
	mu     sync.Mutex
	closed bool
	stmts  [stepStmts][stepChunkLog + 1]*sql.Stmt
}

// padded is the length n rows are padded to: the next power of two.
func padded(n int) int { return 1 << bits.Len(uint(n-1)) }

// prepare prepares, on db, every statement of at most upTo rows (a padded length) that is
// not prepared yet; sqls[s] is statement s's text for n rows, nil for one sent unprepared.
// It runs before the chunk's transaction begins: preparing inside it would wait for a
// second connection of the pool, which may have none to give (SQLite has one). Nor does it
// hold ss.mu while it waits for a connection: a chunk holding the pool's only connection
// calls get, which takes ss.mu, before it gives the connection back.
func (ss *stepStatements) prepare(ctx context.Context, db *sql.DB, sqls [stepStmts]func(n int) string, upTo int) error {
	for s, q := range sqls {
		for i := 0; q != nil && 1<<i <= upTo; i++ {
			ss.mu.Lock()
			closed, have := ss.closed, ss.stmts[s][i] != nil
			ss.mu.Unlock()
			if closed {
				return sql.ErrConnDone
			}
			if have {
				continue
			}
			st, err := db.PrepareContext(ctx, q(1<<i))
			if err != nil {
				return err
			}
			ss.mu.Lock()
			if ss.closed || ss.stmts[s][i] != nil { // closed meanwhile, or prepared by another chunk
				st.Close()
			} else {
				ss.stmts[s][i] = st
			}
			closed = ss.closed
			ss.mu.Unlock()
			if closed {
				return sql.ErrConnDone
			}
		}
	}
	return nil
}

// get returns statement s for n rows (a padded length), which prepare prepared.
func (ss *stepStatements) get(s stepStmt, n int) (*sql.Stmt, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	st := ss.stmts[s][bits.Len(uint(n))-1]
	if ss.closed || st == nil {
		return nil, sql.ErrConnDone
	}
	return st, nil
}

func (ss *stepStatements) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for _, byLen := range ss.stmts {
		for _, st := range byLen {
			if st != nil {
				st.Close()
			}
		}
	}
}

// setExec runs statement s on rows, each a slice of args, padded (unless pad is false,
// which sends it unprepared), in tx, or on its own when tx is nil.
func (b *Backend) setExec(ctx context.Context, tx *sql.Tx, s stepStmt, rows [][]any, pad bool, q func(n int) string) error {
	args, n := flatten(rows, pad)
	var err error
	switch {
	case !pad && tx == nil:
		_, err = b.db.ExecContext(ctx, q(n), args...)
	case !pad:
		_, err = tx.ExecContext(ctx, q(n), args...)
	default:
		var st *sql.Stmt
		if st, err = b.steps.get(s, n); err != nil {
			return err
		}
		if tx != nil {
			st = tx.StmtContext(ctx, st)
		}
		_, err = st.ExecContext(ctx, args...)
	}
	return err
}

// setQuery is setExec for a statement that reads rows (always padded): head are the
// statement's arguments before the rows'.
func (b *Backend) setQuery(ctx context.Context, tx *sql.Tx, s stepStmt, head []any, rows [][]any) (*sql.Rows, error) {
	args, n := flatten(rows, true)
	st, err := b.steps.get(s, n)
	if err != nil {
		return nil, err
	}
	return tx.StmtContext(ctx, st).QueryContext(ctx, append(head, args...)...)
}

// flatten is the arguments of rows, padded with the last row to a power-of-two count when
// pad is set, and that count.
func flatten(rows [][]any, pad bool) ([]any, int) {
	n := len(rows)
	if pad {
		n = padded(n)
	}
	args := make([]any, 0, n*len(rows[0]))
	for i := range n {
		args = append(args, rows[min(i, len(rows)-1)]...)
	}
	return args, n
}

// prepareSteps prepares the set statements of chunks of up to n keys.
func (b *Backend) prepareSteps(ctx context.Context, n int) error {
	sqls := [stepStmts]func(int) string{b.lockRowsSQL, b.lockFloorsSQL, b.insertRowsSQL, b.upsertRowsSQL}
	if !b.padUpserts() {
		sqls[stmtUpsertRows] = nil
	}
	return b.steps.prepare(ctx, b.db, sqls, padded(n))
}

// padUpserts says whether upserts are padded and prepared: not on PostgreSQL, which refuses
// to change one row twice in one statement.
func (b *Backend) padUpserts() bool { return b.d.Name != Postgres.Name }

// lockRowsSQL reads and locks the rows of n keys, in key order.
func (b *Backend) lockRowsSQL(n int) string {
	return "SELECT lock_key, " + rowColumns(b.d) + " FROM " + leasesTable + " WHERE scope = ? AND lock_key IN (" +
		params(n, "?") + ") ORDER BY lock_key" + b.d.ForUpdate
}

// lockFloorsSQL reads and locks n fence floors, in bucket order.
func (b *Backend) lockFloorsSQL(n int) string {
	return "SELECT bucket, fence_floor FROM " + fencesTable + " WHERE scope = ? AND bucket IN (" +
		params(n, "?") + ") ORDER BY bucket" + b.d.ForUpdate
}

// insertRowsSQL inserts the placeholder rows of n keys (scope, key, placeholderMs) unless
// they have rows.
func (b *Backend) insertRowsSQL(n int) string {
	return b.d.InsertIgnore + " INTO " + leasesTable + " (scope, lock_key, expires_at) VALUES " +
		params(n, "(?, ?, "+b.d.NowMillis+" + ?)") + b.d.OnConflictIgnore
}

// upsertColumns are the columns a chunk writes back, after scope and lock_key.
var upsertColumns = []string{"owner", "holder_id", "hold_count", "fencing_token", "expires_at", "ttl_ms"}

// upsertRowsSQL writes n rows, which exist and are locked, back; an INSERT that updates,
// one statement for all of them where an UPDATE would need one per row.
func (b *Backend) upsertRowsSQL(n int) string {
	var q strings.Builder
	q.WriteString("INSERT INTO " + leasesTable + " (scope, lock_key, " + strings.Join(upsertColumns, ", ") + ") VALUES ")
	q.WriteString(params(n, "(?, ?, ?, ?, ?, ?, ?, ?)"))
	set := make([]string, len(upsertColumns))
	for i, c := range upsertColumns {
		if b.d.Name == MySQL.Name {
			set[i] = c + " = VALUES(" + c + ")"
		} else {
			set[i] = c + " = excluded." + c
		}
	}
	if b.d.Name == MySQL.Name {
		q.WriteString(" ON DUPLICATE KEY UPDATE ")
	} else {
		q.WriteString(" ON CONFLICT (scope, lock_key) DO UPDATE SET ")
	}
	q.WriteString(strings.Join(set, ", "))
	return q.String()
}

// params is n copies of one, comma-separated.
func params(n int, one string) string {
	return one + strings.Repeat(", "+one, n-1)
}
