// Package segment is Meituan Leaf's segment mode: a table row per tag holds the highest ID
// reserved so far; an instance reserves a segment with `UPDATE max_id = max_id + step` and
// reads the row back, in one transaction, then hands the segment out from memory with a
// double buffer (package block) whose step adapts to the consumption rate.
//
// Tags must be created first (Engine.CreateTag): an unknown tag is ErrNotFound, never a new
// sequence starting at 1, because a typo would otherwise silently issue IDs that already
// exist in the tables that use the real tag.
package segment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen/block"
)

// Errors of the segment engine.
var (
	// ErrNotFound means the tag was never created.
	ErrNotFound = errors.New("segment: tag not found")
	// ErrExists means CreateTag named a tag that exists.
	ErrExists = errors.New("segment: tag already exists")
	// ErrUnavailable means the database could not be reached or did not answer.
	// It wraps server.ErrUnavailable, which every service answers as unavailable.
	ErrUnavailable = fmt.Errorf("segment: database %w", server.ErrUnavailable)
)

// Tag is a tag's row.
type Tag struct {
	// Tag is the tag's name.
	Tag string
	// MaxID is one past the highest ID reserved by any instance.
	MaxID int64
	// Step is the configured (smallest) segment size.
	Step int64
	// Description is the operator's note.
	Description string
	// UpdatedAt is when the row last changed (database clock).
	UpdatedAt time.Time
}

// Store is the segment table coordkit_idgen_segments(biz_tag, max_id, step, description,
// updated_at) on SQLite or MySQL. It implements block.Reserver.
type Store struct {
	db *sqldb.DB

	reserve, readRow, insert, list string
}

var _ block.Reserver = (*Store)(nil)

// NewStore creates the table if needed and returns a store on db. The caller keeps
// ownership of db.
func NewStore(ctx context.Context, db *sqldb.DB) (*Store, error) {
	d := db.Dialect
	schema := `CREATE TABLE IF NOT EXISTS coordkit_idgen_segments (
		biz_tag     ` + d.Key + `   NOT NULL PRIMARY KEY,
		max_id      ` + d.Int64 + ` NOT NULL,
		step        ` + d.Int64 + ` NOT NULL,
		description ` + d.Text + `  NOT NULL DEFAULT '',
		updated_at  ` + d.Int64 + ` NOT NULL
	)` + d.TableOptions
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return nil, fmt.Errorf("segment: %s schema: %w", d.Name, err)
	}
	const cols = "SELECT biz_tag, max_id, step, description, updated_at FROM coordkit_idgen_segments"
	return &Store{
		db: db,
		// The CASE keeps every segment at least the configured step, whatever an instance asks.
		reserve: "UPDATE coordkit_idgen_segments SET max_id = max_id + CASE WHEN step > ? THEN step ELSE ? END," +
			" updated_at = " + d.NowMillis + " WHERE biz_tag = ?",
		readRow: cols + " WHERE biz_tag = ?",
		insert: d.InsertIgnore + " INTO coordkit_idgen_segments (biz_tag, max_id, step, description, updated_at)" +
			" VALUES (?, ?, ?, ?, " + d.NowMillis + ")",
		list: cols + " ORDER BY biz_tag",
	}, nil
}

// Reserve implements block.Reserver: it raises max_id by max(step, want) and reads the row
// back in one transaction; the segment is [new max_id - size, new max_id).
func (s *Store) Reserve(ctx context.Context, tag string, want int64) (block.Reservation, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return block.Reservation{}, s.unavailable(ctx, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	res, err := tx.ExecContext(ctx, s.reserve, want, want, tag)
	if err != nil {
		return block.Reservation{}, s.unavailable(ctx, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return block.Reservation{}, s.unavailable(ctx, err)
	} else if n == 0 {
		return block.Reservation{}, fmt.Errorf("%w: %q", ErrNotFound, tag)
	}
	t, err := scanTag(tx.QueryRowContext(ctx, s.readRow, tag))
	if err != nil {
		return block.Reservation{}, s.unavailable(ctx, err)
	}
	if err := tx.Commit(); err != nil {
		return block.Reservation{}, s.unavailable(ctx, err)
	}
	size := max(t.Step, want)
	return block.Reservation{Range: block.Range{Start: t.MaxID - size, End: t.MaxID}, MinStep: t.Step}, nil
}

// Create inserts a tag whose first ID is start.
func (s *Store) Create(ctx context.Context, tag string, start, step int64, description string) (Tag, error) {
	res, err := s.db.ExecContext(ctx, s.insert, tag, start, step, description)
	if err != nil {
		return Tag{}, s.unavailable(ctx, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Tag{}, s.unavailable(ctx, err)
	} else if n == 0 {
		return Tag{}, fmt.Errorf("%w: %q", ErrExists, tag)
	}
	t, err := scanTag(s.db.QueryRowContext(ctx, s.readRow, tag))
	if err != nil {
		return Tag{}, s.unavailable(ctx, err)
	}
	return t, nil
}

// List returns every tag, ordered by name.
func (s *Store) List(ctx context.Context) ([]Tag, error) {
	rows, err := s.db.QueryContext(ctx, s.list)
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	defer rows.Close()
	var out []Tag
	for rows.Next() {
		t, err := scanTag(rows)
		if err != nil {
			return nil, s.unavailable(ctx, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, s.unavailable(ctx, err)
	}
	return out, nil
}

func scanTag(row interface{ Scan(...any) error }) (Tag, error) {
	var t Tag
	var updated int64
	if err := row.Scan(&t.Tag, &t.MaxID, &t.Step, &t.Description, &updated); err != nil {
		return Tag{}, err
	}
	t.UpdatedAt = time.UnixMilli(updated).UTC()
	return t, nil
}

// unavailable wraps a database error as ErrUnavailable through the one shared mapping
// (server.Unavailable): when ctx ended, its cause is returned instead.
func (s *Store) unavailable(ctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("segment: %s: row vanished inside its transaction: %w", s.db.Dialect.Name, err)
	}
	return server.Unavailable(ctx, ErrUnavailable, s.db.Dialect.Name, err)
}
