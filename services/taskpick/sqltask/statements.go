package sqltask

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
)

// statements are prepared once per backend: the MySQL driver otherwise prepares, runs and
// closes every statement with arguments, three round trips instead of one.
type statements struct {
	now, insert, ack, extend, nack, lookup, nextDue, get, stats, requeue, listDead, countDead *sql.Stmt
	// pool settings (settings.go)
	settings, setSettings, setPaused, poolMax, policy, cancel, nowPaused *sql.Stmt
	// limits on pick (limit.go)
	limitLock, liveLeases, takeTokens *sql.Stmt
	// unique keys (uniqueput.go)
	uniqueLock, uniqueRead, uniqueTask, uniqueSeq, uniqueClaim *sql.Stmt
}

// stmtText is a statement to prepare and where to keep it.
type stmtText struct {
	st **sql.Stmt
	q  string
}

// leaseCheck is the WHERE of every statement a lease holder makes: the task is leased, by
// this token and secret (its digest), and its lease has not ended. Parameters: pool, id,
// token, digest. A lease taken before leases had secrets has the empty digest, which no
// secret hashes to: it matches nothing, even a caller that sends an empty digest.
func leaseCheck(nowMillis string) string {
	return " WHERE pool = ? AND id = ? AND state = " + strconv.Itoa(stLeased) + " AND token = ? AND lease_hash = ? AND lease_hash <> '' AND run_at > " + nowMillis
}

// taskCols are the columns a Task is read from.
const taskCols = "id, payload, neg_priority, state, attempt, max_attempts, failures, recoveries, run_at, last_error"

func (s *statements) prepare(ctx context.Context, b *Backend) error {
	d := b.d
	now := d.NowMillis
	avail, leased, dead, done := strconv.Itoa(stAvailable), strconv.Itoa(stLeased), strconv.Itoa(stDead), strconv.Itoa(stDone)
	var ack string
	if b.cfg.Retention > 0 {
		ack = "UPDATE " + table + " SET state = " + done + ", run_at = " + now + " + " +
			strconv.FormatInt(b.cfg.Retention.Milliseconds(), 10) + leaseCheck(now)
	} else {
		ack = "DELETE FROM " + table + leaseCheck(now)
	}
	for _, p := range slices.Concat([]stmtText{
		{&s.now, "SELECT " + now},
		{&s.insert, d.InsertIgnore + " INTO " + table +
			" (pool, id, state, neg_priority, rnd, run_at, token, max_attempts, payload) VALUES (?, ?, " + avail + ", ?, ?, ?, ?, ?, ?)" + d.OnConflictIgnore},
		{&s.ack, ack},
		{&s.extend, "UPDATE " + table + " SET run_at = " + now + " + 1 + ?" + leaseCheck(now)},
		// The last attempt dies; any other is available again after retry_after.
		{&s.nack, "UPDATE " + table + " SET failures = failures + 1, last_error = ?, rnd = ?," +
			" run_at = CASE WHEN attempt >= max_attempts THEN " + now + " ELSE " + now + " + ? END," +
			" state = CASE WHEN attempt >= max_attempts THEN " + dead + " ELSE " + avail + " END" + leaseCheck(now)},
		{&s.lookup, "SELECT state, token, lease_hash, run_at, " + now + " FROM " + table + " WHERE pool = ? AND id = ?"},
		{&s.nextDue, "SELECT MIN(run_at) FROM " + table + " WHERE pool = ? AND state = " + avail + " AND run_at > ?"},
		{&s.get, "SELECT " + taskCols + ", " + now + " FROM " + table + " WHERE pool = ? AND id = ?"},
		// COUNT, not SUM: PostgreSQL sums BIGINTs as NUMERIC.
		{&s.stats, "SELECT " +
			"COUNT(CASE WHEN state = " + avail + " AND run_at <= n THEN 1 END), " +
			"COUNT(CASE WHEN state = " + avail + " AND run_at > n THEN 1 END), " +
			"COUNT(CASE WHEN state = " + leased + " THEN 1 END), " +
			"COUNT(CASE WHEN state = " + dead + " THEN 1 END), " +
			"COUNT(CASE WHEN state = " + done + " THEN 1 END), " +
			"COUNT(CASE WHEN state = " + strconv.Itoa(stCancelled) + " THEN 1 END), " +
			"COALESCE(MIN(CASE WHEN state = " + avail + " AND run_at <= n THEN run_at END), 0), MAX(n) " +
			"FROM (SELECT " + now + " AS n) clock LEFT JOIN " + table + " ON pool = ?"},
		{&s.requeue, "UPDATE " + table + " SET state = " + avail + ", attempt = 0, failures = 0, recoveries = 0, last_error = '', rnd = ?, run_at = ?" +
			" WHERE pool = ? AND id = ? AND state = " + dead},
		{&s.listDead, "SELECT " + taskCols + ", 0 FROM " + table + " WHERE pool = ? AND state = " + dead + " ORDER BY run_at, seq LIMIT ?"},
		{&s.countDead, "SELECT COUNT(*) FROM " + table + " WHERE pool = ? AND state = " + dead},
	}, b.poolStatements(s), uniqueStatements(s, d.Name, d.ForUpdate)) {
		st, err := b.db.PrepareContext(ctx, p.q)
		if err != nil {
			return err
		}
		*p.st = st
	}
	return nil
}

func (s *statements) close() {
	for _, st := range []*sql.Stmt{s.now, s.insert, s.ack, s.extend, s.nack, s.lookup, s.nextDue, s.get, s.stats, s.requeue, s.listDead, s.countDead,
		s.settings, s.setSettings, s.setPaused, s.poolMax, s.policy, s.cancel, s.nowPaused, s.limitLock, s.liveLeases, s.takeTokens,
		s.uniqueLock, s.uniqueRead, s.uniqueTask, s.uniqueSeq, s.uniqueClaim} {
		if st != nil {
			st.Close()
		}
	}
}
