package sqllock

// Dialect holds the few SQL fragments that differ between engines; everything else in this
// package is shared, so a fix to the locking logic lands for every SQL engine at once.
type Dialect struct {
	// Name labels errors ("sqlite", "mysql").
	Name string
	// Schema creates the lock table; each statement must be idempotent. The table is
	// coordkit_locks(scope, lock_key, owner, hold_count, fencing_token, expires_at) with the
	// primary key (scope, lock_key): the unique key that makes two holders impossible.
	Schema []string
	// NowMillis is an expression for the database's clock in Unix milliseconds, truncated
	// (never rounded up: expiry relies on the instant read being at most a millisecond past
	// it): the database, never a service instance's clock, decides expiry.
	NowMillis string
	// ForUpdate follows a SELECT that reads a row the transaction will change ("" when the
	// engine locks the whole database for a write transaction, as SQLite's BEGIN IMMEDIATE).
	ForUpdate string
	// InsertIgnore starts an INSERT that does nothing when the key exists.
	InsertIgnore string
}

// SQLite is the dialect of modernc.org/sqlite. Open the database with OpenSQLite so that
// transactions begin IMMEDIATE (taking the write lock up front) and wait on a busy database.
var SQLite = Dialect{
	Name: "sqlite",
	Schema: []string{`CREATE TABLE IF NOT EXISTS coordkit_locks (
		scope         TEXT    NOT NULL,
		lock_key      TEXT    NOT NULL,
		owner         TEXT    NOT NULL DEFAULT '',
		hold_count    INTEGER NOT NULL DEFAULT 0,
		fencing_token INTEGER NOT NULL DEFAULT 0,
		expires_at    INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (scope, lock_key)
	) WITHOUT ROWID`},
	// SQLite's clock is whole milliseconds, which 'subsec' turns into a floating-point
	// number of seconds: times 1000 it may come out as …999.9999, which a CAST would
	// truncate to a millisecond early. ROUND recovers the exact millisecond.
	NowMillis:    "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)",
	ForUpdate:    "",
	InsertIgnore: "INSERT OR IGNORE",
}

// MySQL is the dialect of MySQL 8 and MariaDB 10.6+ (InnoDB). Keys are VARBINARY so that
// they compare byte for byte: no collation folds case or ignores trailing spaces, which would
// make two different keys one lock.
var MySQL = Dialect{
	Name: "mysql",
	Schema: []string{`CREATE TABLE IF NOT EXISTS coordkit_locks (
		scope         VARBINARY(64)   NOT NULL,
		lock_key      VARBINARY(512)  NOT NULL,
		owner         VARBINARY(128)  NOT NULL DEFAULT '',
		hold_count    INT UNSIGNED    NOT NULL DEFAULT 0,
		fencing_token BIGINT UNSIGNED NOT NULL DEFAULT 0,
		expires_at    BIGINT          NOT NULL DEFAULT 0,
		PRIMARY KEY (scope, lock_key)
	) ENGINE=InnoDB`},
	NowMillis:    "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
	ForUpdate:    " FOR UPDATE",
	InsertIgnore: "INSERT IGNORE",
}
