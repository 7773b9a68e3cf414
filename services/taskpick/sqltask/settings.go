package sqltask

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/coordkit/coordkit/services/taskpick"
)

// poolTable holds one row per pool that has settings (taskpick.PoolSettings): created by
// the first SetPoolSettings, PausePool or ResumePool of the pool. A pool without a row has
// the default settings. retry_initial_ms 0 means no retry policy; max_attempts 0 means the
// service's default; max_leased 0 means no limit; rate 0 means no rate limit, and
// bucket_tokens at bucket_ms (0: never) is its token bucket (taskpick.Refill). The limit
// columns are added to tables made before them (addColumn in migrate).
const poolTable = "coordkit_task_pools"

// poolSchema creates poolTable: a table of its own, so a database made before pool settings
// gets it at start-up as a new one does, and coordkit_tasks is left as it was.
func poolSchema(key, options string) string {
	return `CREATE TABLE IF NOT EXISTS ` + poolTable + ` (
		pool             ` + key + ` NOT NULL PRIMARY KEY,
		paused           SMALLINT NOT NULL DEFAULT 0,
		max_attempts     INTEGER  NOT NULL DEFAULT 0,
		retry_initial_ms BIGINT   NOT NULL DEFAULT 0,
		retry_max_ms     BIGINT   NOT NULL DEFAULT 0,
		retry_multiplier DOUBLE PRECISION NOT NULL DEFAULT 2,
		retry_jitter     DOUBLE PRECISION NOT NULL DEFAULT 0,
		max_leased       INTEGER  NOT NULL DEFAULT 0,
		rate             DOUBLE PRECISION NOT NULL DEFAULT 0,
		burst            INTEGER  NOT NULL DEFAULT 0,
		bucket_tokens    DOUBLE PRECISION NOT NULL DEFAULT 0,
		bucket_ms        BIGINT   NOT NULL DEFAULT 0
	)` + options
}

// settingsCols are the columns a PoolSettings is read from.
const settingsCols = "paused, max_attempts, retry_initial_ms, retry_max_ms, retry_multiplier, retry_jitter, max_leased, rate, burst"

// upsert is an INSERT of pool and cols that, when the pool's row exists, sets cols instead.
func (b *Backend) upsert(cols ...string) string {
	q := "INSERT INTO " + poolTable + " (pool"
	for _, c := range cols {
		q += ", " + c
	}
	q += ") VALUES (?" + ", " + placeholders(len(cols)) + ")"
	if b.d.Name == "mysql" {
		q += " ON DUPLICATE KEY UPDATE "
		for i, c := range cols {
			if i > 0 {
				q += ", "
			}
			q += c + " = VALUES(" + c + ")"
		}
		return q
	}
	q += " ON CONFLICT (pool) DO UPDATE SET "
	for i, c := range cols {
		if i > 0 {
			q += ", "
		}
		q += c + " = excluded." + c
	}
	return q
}

// scanSettings reads settingsCols.
func scanSettings(row interface{ Scan(...any) error }) (taskpick.PoolSettings, error) {
	var s taskpick.PoolSettings
	var paused int
	var initial, maxMs int64
	var mult, jitter float64
	if err := row.Scan(&paused, &s.MaxAttempts, &initial, &maxMs, &mult, &jitter, &s.MaxLeased, &s.Rate, &s.Burst); err != nil {
		return s, err
	}
	s.Paused = paused != 0
	if initial > 0 {
		s.Retry = &taskpick.RetryPolicy{Initial: time.Duration(initial) * time.Millisecond, Max: time.Duration(maxMs) * time.Millisecond,
			Multiplier: mult, Jitter: jitter}
	}
	return s, nil
}

// Settings implements taskpick.Backend.
func (b *Backend) Settings(ctx context.Context, pool string) (taskpick.PoolSettings, bool, error) {
	s, err := scanSettings(b.st.settings.QueryRowContext(ctx, pool))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return taskpick.PoolSettings{}, false, nil
	case err != nil:
		return taskpick.PoolSettings{}, false, b.fail(ctx, err)
	}
	return s, true, nil
}

// SetSettings implements taskpick.Backend: one upsert of every column but paused, then a
// read of the row in the same transaction, which holds the row's lock (or the database's).
func (b *Backend) SetSettings(ctx context.Context, pool string, s taskpick.PoolSettings) (taskpick.PoolSettings, error) {
	var initial, maxMs int64
	mult, jitter := float64(taskpick.DefaultMultiplier), 0.0
	if r := s.Retry; r != nil {
		initial, maxMs, mult, jitter = r.Initial.Milliseconds(), r.Max.Milliseconds(), r.Multiplier, r.Jitter
	}
	var out taskpick.PoolSettings
	err := b.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.StmtContext(ctx, b.st.setSettings).ExecContext(ctx, pool, s.MaxAttempts, initial, maxMs, mult, jitter, s.MaxLeased, s.Rate, s.Burst); err != nil {
			return err
		}
		var err error
		out, err = scanSettings(tx.StmtContext(ctx, b.st.settings).QueryRowContext(ctx, pool))
		return err
	})
	if err != nil {
		return taskpick.PoolSettings{}, b.fail(ctx, err)
	}
	return out, nil
}

// SetPaused implements taskpick.Backend.
func (b *Backend) SetPaused(ctx context.Context, pool string, paused bool) error {
	flag := 0
	if paused {
		flag = 1
	}
	err := b.d.Retry(ctx, func() error {
		_, err := b.st.setPaused.ExecContext(ctx, pool, flag)
		return err
	})
	if err != nil {
		return b.fail(ctx, err)
	}
	return nil
}

// policyDelay is the pool's retry delay for the current attempt of a task (0 without a
// policy, or when the task is gone: the Nack then reports that).
func (b *Backend) policyDelay(ctx context.Context, pool, id string) (time.Duration, error) {
	var attempt uint32
	var initial, maxMs int64
	var mult, jitter float64
	err := b.st.policy.QueryRowContext(ctx, pool, id).Scan(&attempt, &initial, &maxMs, &mult, &jitter)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, b.fail(ctx, err)
	}
	return time.Duration(taskpick.DelayMillis(initial, maxMs, mult, jitter, attempt, rand.Float64())) * time.Millisecond, nil
}

// Cancel implements taskpick.Backend: one statement that changes the task only while it is
// available (or delayed); when it changed nothing, a read says why.
func (b *Backend) Cancel(ctx context.Context, pool, id string) error {
	for range 3 { // a task seen available after the statement missed it was leased and given back meanwhile
		var res sql.Result
		err := b.d.Retry(ctx, func() (err error) {
			res, err = b.st.cancel.ExecContext(ctx, pool, id)
			return err
		})
		if err != nil {
			return b.fail(ctx, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return b.fail(ctx, err)
		}
		if n == 1 {
			return nil
		}
		l, err := b.lookup(ctx, pool, id)
		if err != nil {
			return err
		}
		switch l.state {
		case stCancelled:
			return nil
		case stLeased:
			return taskpick.ErrCancelLeased
		case stDead:
			return taskpick.ErrCancelDead
		case stDone:
			return taskpick.ErrCancelDone
		}
	}
	return taskpick.ErrCancelLeased
}

// poolStatements are the statements of pool settings, added to statements.prepare.
func (b *Backend) poolStatements(s *statements) []stmtText {
	now := b.d.NowMillis
	cancel := "DELETE FROM " + table
	if b.cfg.Retention > 0 {
		cancel = "UPDATE " + table + " SET state = " + strconv.Itoa(stCancelled) + ", run_at = " + now + " + " +
			strconv.FormatInt(b.cfg.Retention.Milliseconds(), 10)
	}
	cancel += " WHERE pool = ? AND id = ? AND state = " + strconv.Itoa(stAvailable)
	return []stmtText{
		{&s.settings, "SELECT " + settingsCols + " FROM " + poolTable + " WHERE pool = ?"},
		{&s.setSettings, b.upsert("max_attempts", "retry_initial_ms", "retry_max_ms", "retry_multiplier", "retry_jitter", "max_leased", "rate", "burst")},
		{&s.setPaused, b.upsert("paused")},
		{&s.poolMax, "SELECT max_attempts FROM " + poolTable + " WHERE pool = ?"},
		{&s.policy, "SELECT t.attempt, COALESCE(p.retry_initial_ms, 0), COALESCE(p.retry_max_ms, 0), COALESCE(p.retry_multiplier, 2)," +
			" COALESCE(p.retry_jitter, 0) FROM " + table + " t LEFT JOIN " + poolTable + " p ON p.pool = t.pool WHERE t.pool = ? AND t.id = ?"},
		{&s.cancel, cancel},
		{&s.nowPaused, "SELECT " + now + ", COALESCE(MAX(paused), 0), " + limitedExpr + " FROM " + poolTable + " WHERE pool = ?"},
		{&s.limitLock, "SELECT " + now + ", paused, max_leased, rate, burst, bucket_tokens, bucket_ms FROM " + poolTable + " WHERE pool = ?" + b.d.ForUpdate},
		{&s.takeTokens, "UPDATE " + poolTable + " SET bucket_tokens = ?, bucket_ms = ? WHERE pool = ?"},
		{&s.liveLeases, "SELECT COUNT(*), MIN(run_at) FROM " + table + " WHERE pool = ? AND state = " + strconv.Itoa(stLeased) +
			" AND " + pickOnly[taskpick.FIFO] + " AND run_at > ?"},
	}
}
