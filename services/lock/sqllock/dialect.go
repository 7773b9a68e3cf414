package sqllock

import (
	"errors"

	"github.com/go-sql-driver/mysql"
)

// Dialect holds the few SQL fragments that differ between engines; everything else in this
// package is shared, so a fix to the locking logic lands for every SQL engine at once.
type Dialect struct {
	// Name labels errors ("sqlite", "mysql").
	Name string
	// Schema creates the tables; each statement must be idempotent. The tables are
	// coordkit_lock_leases(scope, lock_key, owner, hold_count, fencing_token, expires_at,
	// ttl_ms) with the primary key (scope, lock_key), the unique key that makes two holders
	// impossible, and an index on (scope, expires_at) for the janitor; and
	// coordkit_lock_fences(scope, bucket, fence_floor) with the primary key (scope, bucket);
	// and coordkit_lock_waiters(scope, lock_key, owner, arrival, deadline), fair mode's lines,
	// with the primary key (scope, lock_key, owner) and indexes on (scope, lock_key, arrival)
	// and (scope, deadline).
	Schema []string
	// TableExists counts the tables named by its one parameter (0 or 1).
	TableExists string
	// NowMillis is an expression for the database's clock in Unix milliseconds, truncated
	// (never rounded up: expiry relies on the instant read being at most a millisecond past
	// it): the database, never a service instance's clock, decides expiry.
	NowMillis string
	// ForUpdate follows a SELECT that reads a row the transaction will change ("" when the
	// engine locks the whole database for a write transaction, as SQLite's BEGIN IMMEDIATE).
	ForUpdate string
	// InsertIgnore starts an INSERT that does nothing when the key exists.
	InsertIgnore string
	// InsertInTx says that a write transaction locks the whole database (SQLite's BEGIN
	// IMMEDIATE), so a new key's row is inserted inside the transaction that takes it: no
	// other transaction runs meanwhile, so none can deadlock with it, and the acquire is one
	// write instead of two. Otherwise the insert runs on its own first (see the package doc).
	InsertInTx bool
	// Retryable says whether a statement run on its own (autocommit, no other lock held)
	// failed only because the engine chose it as a deadlock victim, so running it again is
	// safe. Nil: never.
	Retryable func(error) bool
}

// SQLite is the dialect of modernc.org/sqlite. Open the database with OpenSQLite so that
// transactions begin IMMEDIATE (taking the write lock up front) and wait on a busy database.
var SQLite = Dialect{
	Name: "sqlite",
	Schema: []string{
		`CREATE TABLE IF NOT EXISTS coordkit_lock_leases (
		scope         TEXT    NOT NULL,
		lock_key      TEXT    NOT NULL,
		owner         TEXT    NOT NULL DEFAULT '',
		hold_count    INTEGER NOT NULL DEFAULT 0,
		fencing_token INTEGER NOT NULL DEFAULT 0,
		expires_at    INTEGER NOT NULL DEFAULT 0,
		ttl_ms        INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (scope, lock_key)
	) WITHOUT ROWID`,
		`CREATE INDEX IF NOT EXISTS coordkit_lock_leases_expiry ON coordkit_lock_leases (scope, expires_at)`,
		`CREATE TABLE IF NOT EXISTS coordkit_lock_fences (
		scope       TEXT    NOT NULL,
		bucket      INTEGER NOT NULL,
		fence_floor INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (scope, bucket)
	) WITHOUT ROWID`,
		`CREATE TABLE IF NOT EXISTS coordkit_lock_waiters (
		scope    TEXT    NOT NULL,
		lock_key TEXT    NOT NULL,
		owner    TEXT    NOT NULL,
		arrival  INTEGER NOT NULL,
		deadline INTEGER NOT NULL,
		PRIMARY KEY (scope, lock_key, owner)
	) WITHOUT ROWID`,
		`CREATE INDEX IF NOT EXISTS coordkit_lock_waiters_line ON coordkit_lock_waiters (scope, lock_key, arrival)`,
		`CREATE INDEX IF NOT EXISTS coordkit_lock_waiters_deadline ON coordkit_lock_waiters (scope, deadline)`,
	},
	TableExists: "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
	// SQLite's clock is whole milliseconds, which 'subsec' turns into a floating-point
	// number of seconds: times 1000 it may come out as …999.9999, which a CAST would
	// truncate to a millisecond early. ROUND recovers the exact millisecond.
	NowMillis:    "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)",
	ForUpdate:    "",
	InsertIgnore: "INSERT OR IGNORE",
	InsertInTx:   true,
}

// MySQL is the dialect of MySQL 8 and MariaDB 10.6+ (InnoDB). Keys are VARBINARY so that
// they compare byte for byte: no collation folds case or ignores trailing spaces, which would
// make two different keys one lock.
var MySQL = Dialect{
	Name: "mysql",
	Schema: []string{
		`CREATE TABLE IF NOT EXISTS coordkit_lock_leases (
		scope         VARBINARY(64)   NOT NULL,
		lock_key      VARBINARY(512)  NOT NULL,
		owner         VARBINARY(128)  NOT NULL DEFAULT '',
		hold_count    INT UNSIGNED    NOT NULL DEFAULT 0,
		fencing_token BIGINT UNSIGNED NOT NULL DEFAULT 0,
		expires_at    BIGINT          NOT NULL DEFAULT 0,
		ttl_ms        BIGINT          NOT NULL DEFAULT 0,
		PRIMARY KEY (scope, lock_key),
		INDEX coordkit_lock_leases_expiry (scope, expires_at)
	) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS coordkit_lock_fences (
		scope       VARBINARY(64)   NOT NULL,
		bucket      INT UNSIGNED    NOT NULL,
		fence_floor BIGINT UNSIGNED NOT NULL DEFAULT 0,
		PRIMARY KEY (scope, bucket)
	) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS coordkit_lock_waiters (
		scope    VARBINARY(64)  NOT NULL,
		lock_key VARBINARY(512) NOT NULL,
		owner    VARBINARY(128) NOT NULL,
		arrival  BIGINT         NOT NULL,
		deadline BIGINT         NOT NULL,
		PRIMARY KEY (scope, lock_key, owner),
		INDEX coordkit_lock_waiters_line (scope, lock_key, arrival),
		INDEX coordkit_lock_waiters_deadline (scope, deadline)
	) ENGINE=InnoDB`,
	},
	TableExists:  "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
	NowMillis:    "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
	ForUpdate:    " FOR UPDATE",
	InsertIgnore: "INSERT IGNORE",
	Retryable:    mysqlDeadlock,
}

// mysqlDeadlock reports InnoDB's deadlock error. Two INSERT IGNOREs of one key whose row
// was just deleted can each take a shared lock on the delete-marked record and then both
// need it exclusively; InnoDB rolls one back.
func mysqlDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213 // ER_LOCK_DEADLOCK
}
