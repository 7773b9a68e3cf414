package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Postgres is the dialect of PostgreSQL 13 and later; open the database with OpenPostgres,
// which also lets the services write their statements with ? placeholders.
//
// Keys are TEXT in the "C" collation: it compares byte by byte, so no two different keys
// are one (every key is valid UTF-8 without NUL, which the services check at the edge, and
// TEXT could hold no other). The clock is clock_timestamp(), the server's time when the
// expression is evaluated (not the transaction's start, as now() would be). A SELECT … FOR
// UPDATE evaluates its columns before it waits for a row lock, and again after the wait
// only when the row changed meanwhile: a clock it reads may be from before the wait, so a
// lease's reported end must be measured from before the statement was sent (the services
// measure it from before the call).
var Postgres = Dialect{
	Name:             "postgres",
	Key:              `TEXT COLLATE "C"`,
	Text:             "TEXT",
	Int64:            "BIGINT",
	Blob:             "BYTEA",
	TableOptions:     "",
	TableExists:      "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?",
	NowMillis:        "(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000))::BIGINT",
	ForUpdate:        " FOR UPDATE",
	SkipLocked:       " FOR UPDATE SKIP LOCKED",
	InsertIgnore:     "INSERT",
	OnConflictIgnore: " ON CONFLICT DO NOTHING",
	Deadlock:         postgresRetryable,
}

// postgresRetryable reports the errors after which PostgreSQL rolled the transaction back
// whole and running it again is safe: deadlock_detected (40P01) and serialization_failure
// (40001).
func postgresRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// PostgresConfig configures OpenPostgres. The zero value of every field means its default.
type PostgresConfig struct {
	// Schema is the schema coordkit's tables live in, created when missing; default
	// "coordkit". Every connection's search_path is this schema alone.
	Schema string
	// MaxConns bounds the pool; default 32.
	MaxConns int
	// StatementTimeout bounds every statement on the server (statement_timeout); default
	// 10s, unless the URL sets it (options=-c%20statement_timeout=…). It also bounds how
	// long a session may sit idle inside a transaction (idle_in_transaction_session_timeout,
	// unless the URL sets it): the server then ends the session, and the row locks of a
	// client that went silent mid-transaction (a partition, a host that lost power) are
	// freed instead of staying until TCP keepalive notices, hours later. No transaction of
	// coordkit's waits between its statements for longer than a statement may run.
	StatementTimeout time.Duration
}

// DefaultPostgresSchema is the schema OpenPostgres uses when PostgresConfig.Schema is empty.
const DefaultPostgresSchema = "coordkit"

// OpenPostgres connects to the PostgreSQL database at rawURL, a standard
// postgres://user:pass@host:5432/db?sslmode=… URL (or key=value string), through pgx/v5's
// database/sql driver, so that the services share their SQL with the other engines. Unless
// the URL says otherwise it dials within 2s and bounds every statement to
// cfg.StatementTimeout: a database that is down or stuck is answered unavailable instead of
// hanging callers. It creates cfg.Schema when missing. Errors never show the password.
//
// The services write ? placeholders, as for MySQL and SQLite; the handle numbers them
// ($1, $2, …) before PostgreSQL sees a statement.
func OpenPostgres(ctx context.Context, rawURL string, cfg PostgresConfig) (*DB, error) {
	if cfg.Schema == "" {
		cfg.Schema = DefaultPostgresSchema
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 32
	}
	if cfg.StatementTimeout <= 0 {
		cfg.StatementTimeout = 10 * time.Second
	}
	pc, err := pgx.ParseConfig(rawURL)
	if err != nil {
		// pgx's parse errors show the string with its password masked.
		return nil, fmt.Errorf("sqldb: postgres url: %w", err)
	}
	shown := RedactPostgresURL(rawURL)
	if !hasParam(rawURL, "connect_timeout") {
		pc.ConnectTimeout = 2 * time.Second
	}
	for _, param := range []string{"statement_timeout", "idle_in_transaction_session_timeout"} {
		if _, ok := pc.RuntimeParams[param]; !ok && !strings.Contains(pc.RuntimeParams["options"], param) {
			pc.RuntimeParams[param] = fmt.Sprint(cfg.StatementTimeout.Milliseconds())
		}
	}
	pc.RuntimeParams["search_path"] = QuoteIdent(cfg.Schema)
	if _, ok := pc.RuntimeParams["application_name"]; !ok {
		pc.RuntimeParams["application_name"] = "coordkit"
	}
	db := sql.OpenDB(placeholderConnector{stdlib.GetConnector(*pc)})
	db.SetMaxOpenConns(cfg.MaxConns)
	db.SetMaxIdleConns(cfg.MaxConns)
	db.SetConnMaxLifetime(5 * time.Minute)
	if err := createSchema(ctx, db, cfg.Schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqldb: postgres %s: %w", shown, err)
	}
	return &DB{DB: db, Dialect: Postgres}, nil
}

// createSchema creates schema unless it exists. Two instances starting at once may both try:
// CREATE SCHEMA IF NOT EXISTS can then fail on the catalog's unique index, and the loser
// finds the schema there.
func createSchema(ctx context.Context, db *sql.DB, schema string) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_namespace WHERE nspname = ?", schema).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+QuoteIdent(schema))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create schema %s: %w", QuoteIdent(schema), err)
	}
	return nil
}

// QuoteIdent quotes a PostgreSQL identifier ("my schema" stays one name, and no name can
// end the statement).
func QuoteIdent(name string) string { return pgx.Identifier{name}.Sanitize() }

// RedactPostgresURL is rawURL with its passwords replaced by "xxxxx", for logs and errors:
// the user's, in the userinfo or the query, and the client key's (sslpassword).
func RedactPostgresURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		if strings.Contains(rawURL, "password") || strings.Contains(rawURL, "@") {
			return "(a postgres connection string)"
		}
		return rawURL
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	for _, secret := range []string{"password", "sslpassword"} {
		if q.Has(secret) {
			q.Set(secret, "xxxxx")
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

// hasParam says whether the URL or key=value string sets name.
func hasParam(raw, name string) bool {
	if u, err := url.Parse(raw); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		return u.Query().Has(name)
	}
	return strings.Contains(raw, name+"=")
}
