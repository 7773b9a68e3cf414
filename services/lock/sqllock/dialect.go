package sqllock

import (
	"fmt"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// Dialect is a SQL engine's dialect (sqldb.Dialect) with what only the lock tables need;
// everything else in this package is shared, so a fix to the locking logic lands for every SQL
// engine at once. The dialect's NowMillis must be truncated, never rounded up: expiry relies
// on the instant read being at most a millisecond past it. Deadlock is asked only of a
// statement run on its own (autocommit, no other lock held).
type Dialect struct {
	sqldb.Dialect
	// Schema creates the tables; each statement must be idempotent. The tables are
	// coordkit_lock_leases(scope, lock_key, owner, hold_count, fencing_token, expires_at,
	// ttl_ms, holder_id) with the primary key (scope, lock_key), the unique key that makes two holders
	// impossible, and an index on (scope, expires_at) for the janitor; and
	// coordkit_lock_fences(scope, bucket, fence_floor) with the primary key (scope, bucket);
	// and coordkit_lock_waiters(scope, lock_key, owner, arrival, deadline), fair mode's lines,
	// with the primary key (scope, lock_key, owner) and indexes on (scope, lock_key, arrival)
	// and (scope, deadline).
	Schema []string
	// ColumnExists counts the columns named by its second parameter in the table named by
	// its first (0 or 1).
	ColumnExists string
	// AddHolderID adds holder_id to a coordkit_lock_leases table that an older version
	// created without it.
	AddHolderID string
	// InsertInTx says that a new key's row is inserted inside the transaction that takes it,
	// which can deadlock with no other transaction on this engine, so the acquire is one
	// write (one commit) instead of two. Otherwise the insert runs on its own first (see
	// "Deadlocks" in the package doc).
	InsertInTx bool
	// Serialized says that a write transaction locks the whole database (SQLite's BEGIN
	// IMMEDIATE): transactions run one at a time anyway, so they are grouped (group.go).
	Serialized bool
	// BatchedCAS says that concurrent compare-and-sets go out together as one UPDATE … FROM
	// (VALUES …) (cas.go): PostgreSQL, where one statement and one commit for many rows
	// costs less than one each.
	BatchedCAS bool
}

// SQLite is the dialect of modernc.org/sqlite. Open the database with OpenSQLite so that
// transactions begin IMMEDIATE (taking the write lock up front) and wait on a busy database.
var SQLite = Dialect{
	Dialect: sqldb.SQLite,
	Schema: []string{
		`CREATE TABLE IF NOT EXISTS coordkit_lock_leases (
		scope         TEXT    NOT NULL,
		lock_key      TEXT    NOT NULL,
		owner         TEXT    NOT NULL DEFAULT '',
		hold_count    INTEGER NOT NULL DEFAULT 0,
		fencing_token INTEGER NOT NULL DEFAULT 0,
		expires_at    INTEGER NOT NULL DEFAULT 0,
		ttl_ms        INTEGER NOT NULL DEFAULT 0,
		holder_id     TEXT    NOT NULL DEFAULT '',
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
	ColumnExists: "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?",
	AddHolderID:  "ALTER TABLE coordkit_lock_leases ADD COLUMN holder_id TEXT NOT NULL DEFAULT ''",
	// No other transaction runs meanwhile, so none can deadlock with the insert.
	InsertInTx: true,
	Serialized: true,
}

// MySQL is the dialect of MySQL 8 and MariaDB 10.6+ (InnoDB). Keys are VARBINARY so that
// they compare byte for byte: no collation folds case or ignores trailing spaces, which would
// make two different keys one lock.
var MySQL = Dialect{
	Dialect: sqldb.MySQL,
	Schema: []string{
		`CREATE TABLE IF NOT EXISTS coordkit_lock_leases (
		scope         VARBINARY(64)   NOT NULL,
		lock_key      VARBINARY(512)  NOT NULL,
		owner         VARBINARY(128)  NOT NULL DEFAULT '',
		hold_count    INT UNSIGNED    NOT NULL DEFAULT 0,
		fencing_token BIGINT UNSIGNED NOT NULL DEFAULT 0,
		expires_at    BIGINT          NOT NULL DEFAULT 0,
		ttl_ms        BIGINT          NOT NULL DEFAULT 0,
		holder_id     VARBINARY(32)   NOT NULL DEFAULT '',
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
	ColumnExists: "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?",
	AddHolderID:  "ALTER TABLE coordkit_lock_leases ADD COLUMN holder_id VARBINARY(32) NOT NULL DEFAULT ''",
}

// Postgres is the dialect of PostgreSQL 13 and later (sqldb.OpenPostgres). Keys and owners
// are TEXT in the "C" collation, compared byte for byte like MySQL's VARBINARY; counters are
// BIGINT, which is signed: fencing tokens stay below 2^63, which a key reaches after 2^63
// holders, and a CHECK says so. The tables live in the connection's schema (search_path,
// sqldb.PostgresConfig.Schema).
//
// InsertInTx is on. PostgreSQL takes no gap locks: a locking read that finds no row locks
// nothing, and INSERT … ON CONFLICT DO NOTHING waits only for a transaction that inserted,
// updated or deleted the same key and has not ended, then inserts or does nothing. A transaction here
// inserts its key's row before it locks anything else (the key row, then its fence floor,
// the order of every transaction), so it waits only on a holder of that one row, which
// waits on nothing the inserter holds: no cycle. Inside the transaction the insert shares
// its commit, and so its WAL flush, with the grant; run on its own it would commit, and
// flush, separately. Write transactions do not exclude each other, so Serialized is off
// and transactions are not grouped.
var Postgres = Dialect{
	Dialect: sqldb.Postgres,
	Schema: []string{
		`CREATE TABLE IF NOT EXISTS coordkit_lock_leases (
		scope         TEXT COLLATE "C" NOT NULL,
		lock_key      TEXT COLLATE "C" NOT NULL,
		owner         TEXT COLLATE "C" NOT NULL DEFAULT '',
		hold_count    BIGINT NOT NULL DEFAULT 0,
		fencing_token BIGINT NOT NULL DEFAULT 0 CHECK (fencing_token >= 0),
		expires_at    BIGINT NOT NULL DEFAULT 0,
		ttl_ms        BIGINT NOT NULL DEFAULT 0,
		holder_id     TEXT COLLATE "C" NOT NULL DEFAULT '',
		PRIMARY KEY (scope, lock_key)
	)`,
		`CREATE INDEX IF NOT EXISTS coordkit_lock_leases_expiry ON coordkit_lock_leases (scope, expires_at)`,
		`CREATE TABLE IF NOT EXISTS coordkit_lock_fences (
		scope       TEXT COLLATE "C" NOT NULL,
		bucket      BIGINT NOT NULL,
		fence_floor BIGINT NOT NULL DEFAULT 0 CHECK (fence_floor >= 0),
		PRIMARY KEY (scope, bucket)
	)`,
		`CREATE TABLE IF NOT EXISTS coordkit_lock_waiters (
		scope    TEXT COLLATE "C" NOT NULL,
		lock_key TEXT COLLATE "C" NOT NULL,
		owner    TEXT COLLATE "C" NOT NULL,
		arrival  BIGINT NOT NULL,
		deadline BIGINT NOT NULL,
		PRIMARY KEY (scope, lock_key, owner)
	)`,
		`CREATE INDEX IF NOT EXISTS coordkit_lock_waiters_line ON coordkit_lock_waiters (scope, lock_key, arrival)`,
		`CREATE INDEX IF NOT EXISTS coordkit_lock_waiters_deadline ON coordkit_lock_waiters (scope, deadline)`,
	},
	ColumnExists: "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? AND column_name = ?",
	AddHolderID:  `ALTER TABLE coordkit_lock_leases ADD COLUMN IF NOT EXISTS holder_id TEXT COLLATE "C" NOT NULL DEFAULT ''`,
	InsertInTx:   true,
	BatchedCAS:   true,
}

// dialectOf is the lock dialect of an engine's dialect, chosen by its name.
func dialectOf(d sqldb.Dialect) (Dialect, error) {
	switch d.Name {
	case SQLite.Name:
		return SQLite, nil
	case MySQL.Name:
		return MySQL, nil
	case Postgres.Name:
		return Postgres, nil
	}
	return Dialect{}, fmt.Errorf("sqllock: no lock dialect for %q databases (want %q, %q or %q)", d.Name, SQLite.Name, MySQL.Name, Postgres.Name)
}
