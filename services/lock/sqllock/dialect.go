package sqllock

// Dialect holds the few SQL fragments that differ between engines; everything else in this
// package is shared, so a fix to the locking logic lands for every SQL engine at once.
type Dialect struct {
	// Name labels errors and metrics ("sqlite", "mysql").
	Name string
	// Schema creates the lock table; each statement must be idempotent.
	Schema []string
	// NowMillis is an expression for the database's clock in Unix milliseconds: the database,
	// never a service instance's clock, decides expiry.
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
		lock_key      TEXT    NOT NULL PRIMARY KEY,
		owner         TEXT    NOT NULL DEFAULT '',
		hold_count    INTEGER NOT NULL DEFAULT 0,
		fencing_token INTEGER NOT NULL DEFAULT 0,
		expires_at    INTEGER NOT NULL DEFAULT 0
	) WITHOUT ROWID`},
	NowMillis:    "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
	ForUpdate:    "",
	InsertIgnore: "INSERT OR IGNORE",
}
