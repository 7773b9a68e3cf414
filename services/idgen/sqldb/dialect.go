// Package sqldb opens the SQL database that the ID engines keep their tables in (segments and
// worker-id leases): an embedded SQLite file by default, MySQL or MariaDB for several
// instances on several machines. Dialect holds the few fragments where the two differ, so the
// engines write their SQL once.
package sqldb

import "database/sql"

// Dialect holds the SQL fragments that differ between engines.
type Dialect struct {
	// Name labels errors ("sqlite", "mysql").
	Name string
	// Key is the column type of a short binary-compared key (a tag): no collation may fold
	// case or trailing spaces, which would make two tags one.
	Key string
	// Text is the column type of free text.
	Text string
	// Int64 is the column type of a signed 64-bit integer.
	Int64 string
	// TableOptions follows a CREATE TABLE's closing parenthesis.
	TableOptions string
	// NowMillis is an expression for the database's clock in Unix milliseconds: the
	// database, never an instance's clock, decides when a lease expired.
	NowMillis string
	// ForUpdate follows a SELECT of rows the transaction will change ("" where a write
	// transaction locks the whole database, as SQLite's BEGIN IMMEDIATE).
	ForUpdate string
	// InsertIgnore starts an INSERT that does nothing when the key exists.
	InsertIgnore string
}

// SQLite is the dialect of modernc.org/sqlite; open the database with OpenSQLite.
var SQLite = Dialect{
	Name:         "sqlite",
	Key:          "TEXT",
	Text:         "TEXT",
	Int64:        "INTEGER",
	TableOptions: "",
	NowMillis:    "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
	ForUpdate:    "",
	InsertIgnore: "INSERT OR IGNORE",
}

// MySQL is the dialect of MySQL 8 and MariaDB 10.6+ (InnoDB).
var MySQL = Dialect{
	Name:         "mysql",
	Key:          "VARBINARY(128)",
	Text:         "VARCHAR(256)",
	Int64:        "BIGINT",
	TableOptions: " ENGINE=InnoDB",
	NowMillis:    "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
	ForUpdate:    " FOR UPDATE",
	InsertIgnore: "INSERT IGNORE",
}

// DB is a database handle with its dialect.
type DB struct {
	*sql.DB
	// Dialect is the engine's SQL flavour.
	Dialect Dialect
}
