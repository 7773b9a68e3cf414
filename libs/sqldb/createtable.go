package sqldb

import "context"

// CreateTable runs ddl, a CREATE TABLE IF NOT EXISTS of table, so that instances starting
// together on one database may all run it. PostgreSQL lets two concurrent CREATE TABLE IF
// NOT EXISTS of one name both find it missing; the later one then fails on its catalog's
// unique index once the first commits. Whoever fails but finds the table there is done.
func (db *DB) CreateTable(ctx context.Context, table, ddl string) error {
	_, err := db.ExecContext(ctx, ddl)
	if err == nil {
		return nil
	}
	var n int
	if qerr := db.QueryRowContext(ctx, db.Dialect.TableExists, table).Scan(&n); qerr == nil && n > 0 {
		return nil
	}
	return err
}
