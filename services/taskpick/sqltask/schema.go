package sqltask

import (
	"context"
	"fmt"
	"strconv"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// table holds every task of every pool; see the package doc for its columns.
const table = "coordkit_tasks"

// Task states as stored.
const (
	stAvailable = 1
	stLeased    = 2
	stDead      = 3
	stDone      = 4
)

// schema creates the table and its indexes; every statement is idempotent.
func schema(d sqldb.Dialect) []string {
	if d.Name == "sqlite" {
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
			seq          INTEGER PRIMARY KEY AUTOINCREMENT,
			pool         TEXT    NOT NULL,
			id           TEXT    NOT NULL,
			state        INTEGER NOT NULL,
			neg_priority INTEGER NOT NULL,
			rnd          INTEGER NOT NULL,
			run_at       INTEGER NOT NULL,
			token        INTEGER NOT NULL,
			attempt      INTEGER NOT NULL DEFAULT 0,
			max_attempts INTEGER NOT NULL,
			failures     INTEGER NOT NULL DEFAULT 0,
			recoveries   INTEGER NOT NULL DEFAULT 0,
			payload      BLOB    NOT NULL,
			last_error   TEXT    NOT NULL DEFAULT '',
			lease_hash   TEXT    NOT NULL DEFAULT ''
		)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS coordkit_tasks_id ON ` + table + ` (pool, id)`,
			`CREATE INDEX IF NOT EXISTS coordkit_tasks_fifo ON ` + table + ` (pool, state, run_at, seq)`,
			`CREATE INDEX IF NOT EXISTS coordkit_tasks_priority ON ` + table + ` (pool, state, neg_priority, run_at, seq)`,
			`CREATE INDEX IF NOT EXISTS coordkit_tasks_random ON ` + table + ` (pool, state, rnd)`,
			`CREATE INDEX IF NOT EXISTS coordkit_tasks_sweep ON ` + table + ` (state, run_at)`,
		}
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + table + ` (
		seq          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
		pool         VARBINARY(512)  NOT NULL,
		id           VARBINARY(512)  NOT NULL,
		state        TINYINT         NOT NULL,
		neg_priority BIGINT          NOT NULL,
		rnd          INT UNSIGNED    NOT NULL,
		run_at       BIGINT          NOT NULL,
		token        BIGINT UNSIGNED NOT NULL,
		attempt      INT UNSIGNED    NOT NULL DEFAULT 0,
		max_attempts INT UNSIGNED    NOT NULL,
		failures     INT UNSIGNED    NOT NULL DEFAULT 0,
		recoveries   INT UNSIGNED    NOT NULL DEFAULT 0,
		payload      MEDIUMBLOB      NOT NULL,
		last_error   VARBINARY(1024) NOT NULL DEFAULT '',
		lease_hash   VARBINARY(64)   NOT NULL DEFAULT '',
		PRIMARY KEY (seq),
		UNIQUE KEY coordkit_tasks_id (pool, id),
		INDEX coordkit_tasks_fifo (pool, state, run_at, seq),
		INDEX coordkit_tasks_priority (pool, state, neg_priority, run_at, seq),
		INDEX coordkit_tasks_random (pool, state, rnd),
		INDEX coordkit_tasks_sweep (state, run_at)
	) ENGINE=InnoDB`,
	}
}

// leaseHashColumn adds lease_hash to a table made before leases had secrets. Its leases have
// the empty digest, which no secret hashes to: they cannot be finished, and are recovered
// when they expire, as a crashed worker's are.
func leaseHashColumn(d sqldb.Dialect) string {
	if d.Name == "sqlite" {
		return `ALTER TABLE ` + table + ` ADD COLUMN lease_hash TEXT NOT NULL DEFAULT ''`
	}
	return `ALTER TABLE ` + table + ` ADD COLUMN lease_hash VARBINARY(64) NOT NULL DEFAULT ''`
}

func migrate(ctx context.Context, db *sqldb.DB) error {
	for _, q := range schema(db.Dialect) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqltask: %s schema: %w", db.Dialect.Name, err)
		}
	}
	hasColumn := func() bool {
		rows, err := db.QueryContext(ctx, "SELECT lease_hash FROM "+table+" WHERE 1 = 0")
		if err != nil {
			return false
		}
		rows.Close()
		return true
	}
	if hasColumn() {
		return nil
	}
	if _, err := db.ExecContext(ctx, leaseHashColumn(db.Dialect)); err != nil && !hasColumn() {
		return fmt.Errorf("sqltask: %s schema: add lease_hash: %w", db.Dialect.Name, err)
	}
	return nil
}

// redateLeases moves the task leases an earlier process granted onto this process's clock,
// where the database's clock is the process's (SQLite, see sqldb.DB.TakeClockShift): each
// keeps at least the time it had left when that process stopped, whether the wall clock was
// stepped forward or back meanwhile, so no lease ends early and none lasts for the length of
// a step back.
func redateLeases(ctx context.Context, db *sqldb.DB) error {
	if !db.Dialect.ProcessClock {
		return nil
	}
	shift, ok := db.TakeClockShift()
	if !ok || shift == 0 {
		return nil
	}
	_, err := db.ExecContext(ctx, "UPDATE "+table+" SET run_at = run_at + ? WHERE state = "+strconv.Itoa(stLeased), shift.Milliseconds())
	if err != nil {
		return fmt.Errorf("sqltask: %s: re-date leases: %w", db.Dialect.Name, err)
	}
	return nil
}
