package sqldb

import (
	"database/sql"
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/coordkit/coordkit/libs/clock"
)

// Dialect holds the SQL fragments that differ between engines, so every service writes its
// SQL once.
type Dialect struct {
	// Name labels errors and metrics ("sqlite", "mysql").
	Name string
	// Key is the column type of a short binary-compared key (a tag, a pool, a task id): no
	// collation may fold case or trailing spaces, which would make two keys one.
	Key string
	// Text is the column type of free text.
	Text string
	// Int64 is the column type of a signed 64-bit integer.
	Int64 string
	// Blob is the column type of an opaque payload of up to 16 MiB.
	Blob string
	// TableOptions follows a CREATE TABLE's closing parenthesis.
	TableOptions string
	// TableExists counts the tables named by its one parameter (0 or 1).
	TableExists string
	// NowMillis is an expression for the database's clock in Unix milliseconds, truncated
	// (never rounded up): the database, never an instance's clock, decides when a lease
	// expired. On SQLite, which lives in the process, the database's clock is the process's
	// clock.Steady (see OpenSQLite), which no step of the wall clock moves; MySQL keeps its
	// server's clock.
	NowMillis string
	// ProcessClock says that NowMillis is the process's clock (DB.Clock), which starts anew
	// with every process: a lease stored by an earlier process may have been timed on a clock
	// that has since been stepped, so a service re-dates the leases it finds at start-up.
	ProcessClock bool
	// ForUpdate follows a SELECT of rows the transaction will change ("" where a write
	// transaction locks the whole database, as SQLite's BEGIN IMMEDIATE).
	ForUpdate string
	// SkipLocked follows a SELECT of rows the transaction will claim, skipping rows another
	// transaction has locked ("" where a write transaction locks the whole database).
	SkipLocked string
	// InsertIgnore starts an INSERT that does nothing when the key exists; the statement
	// ends with OnConflictIgnore.
	InsertIgnore string
	// OnConflictIgnore ends an INSERT begun with InsertIgnore ("" where InsertIgnore says
	// it all).
	OnConflictIgnore string
	// Deadlock says whether a statement failed only because the engine chose it as a
	// deadlock victim and rolled it back whole, so running it again is safe.
	Deadlock func(error) bool
}

// SQLite is the dialect of modernc.org/sqlite; open the database with OpenSQLite.
var SQLite = Dialect{
	Name:         "sqlite",
	Key:          "TEXT",
	Text:         "TEXT",
	Int64:        "INTEGER",
	Blob:         "BLOB",
	TableOptions: "",
	TableExists:  "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
	// A function OpenSQLite registers: the process's steady clock, never SQLite's own
	// unixepoch(), which reads the wall clock.
	NowMillis:    nowFunction + "()",
	ProcessClock: true,
	ForUpdate:    "",
	SkipLocked:   "",
	InsertIgnore: "INSERT OR IGNORE",
	Deadlock:     func(error) bool { return false },
}

// MySQL is the dialect of MySQL 8 and MariaDB 10.6+ (InnoDB).
var MySQL = Dialect{
	Name:         "mysql",
	Key:          "VARBINARY(512)",
	Text:         "VARCHAR(256)",
	Int64:        "BIGINT",
	Blob:         "MEDIUMBLOB",
	TableOptions: " ENGINE=InnoDB",
	TableExists:  "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
	NowMillis:    "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
	ForUpdate:    " FOR UPDATE",
	SkipLocked:   " FOR UPDATE SKIP LOCKED",
	InsertIgnore: "INSERT IGNORE",
	Deadlock:     mysqlDeadlock,
}

// mysqlDeadlock reports InnoDB's deadlock error (ER_LOCK_DEADLOCK): InnoDB rolled the
// statement's transaction back whole.
func mysqlDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// DB is a database handle with its dialect.
type DB struct {
	*sql.DB
	// Dialect is the engine's SQL flavour.
	Dialect Dialect
	// Clock is the clock Dialect.NowMillis reads when Dialect.ProcessClock is set (SQLite);
	// nil for a database that keeps its own.
	Clock *clock.Steady

	marks *clockMarks // SQLite: see clockmark.go
}
