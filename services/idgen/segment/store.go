// Package segment is Meituan Leaf's segment mode: a table row per tag holds the highest ID
// reserved so far; an instance reserves a segment with `UPDATE max_id = max_id + step` and
// reads the row back, in one transaction, then hands the segment out from memory with a
// double buffer (package block) whose step adapts to the consumption rate.
//
// Tags must be created first (Engine.CreateTag): an unknown tag is ErrNotFound, never a new
// sequence starting at 1, because a typo would otherwise silently issue IDs that already
// exist in the tables that use the real tag. For the same reason a deleted tag's row stays as
// a tombstone (deleted_at set): a tag created again under its name continues at or above the
// tombstone's max_id, never below it.
package segment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen/block"
)

// Errors of the segment engine. Those about a tag carry the Connect code a caller gets
// (server.NewError), which server.Error, the one mapping, gives them at the edge.
var (
	// ErrNotFound means the tag was never created. Its code is not_found.
	ErrNotFound = server.NewError(connect.CodeNotFound, "segment: tag not found")
	// ErrExists means CreateTag named a tag that exists. Its code is already_exists.
	ErrExists = server.NewError(connect.CodeAlreadyExists, "segment: tag already exists")
	// ErrBelowTombstone means CreateTag asked a tag that was deleted to start below the
	// deleted tag's max_id, where IDs may already have been issued. It is a *BelowTombstone.
	// Its code is failed_precondition.
	ErrBelowTombstone = server.NewError(connect.CodeFailedPrecondition, "segment: start is below the deleted tag's max_id")
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

// BelowTombstone is the ErrBelowTombstone of one CreateTag: MaxID is the lowest start the
// tag may have.
type BelowTombstone struct {
	// Tag is the tag.
	Tag string
	// Start is the start that was asked for.
	Start int64
	// MaxID is where the deleted tag stopped.
	MaxID int64
}

// Error implements error.
func (e *BelowTombstone) Error() string {
	return fmt.Sprintf("%v: %d < %d", ErrBelowTombstone, e.Start, e.MaxID)
}

// Is makes errors.Is(err, ErrBelowTombstone) hold.
func (e *BelowTombstone) Is(target error) bool { return target == ErrBelowTombstone }

// ConnectCode implements server.Coded: the code of ErrBelowTombstone.
func (e *BelowTombstone) ConnectCode() connect.Code { return connect.CodeFailedPrecondition }

// Store is the segment table coordkit_idgen_segments(biz_tag, max_id, step, description,
// updated_at, deleted_at) on SQLite, MySQL or PostgreSQL. deleted_at is 0 for a live tag and
// the deletion time (database clock, Unix ms) for a tombstone. It implements block.Reserver.
type Store struct {
	db *sqldb.DB

	reserve, readRow, insert, list                    string
	revive, reviveAt, update, updateStep, updateDescr string
	remove                                            string
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
		updated_at  ` + d.Int64 + ` NOT NULL,
		deleted_at  ` + d.Int64 + ` NOT NULL DEFAULT 0
	)` + d.TableOptions
	if err := db.CreateTable(ctx, "coordkit_idgen_segments", schema); err != nil {
		return nil, fmt.Errorf("segment: %s schema: %w", d.Name, err)
	}
	if err := addDeletedAt(ctx, db); err != nil {
		return nil, err
	}
	const (
		cols = "SELECT biz_tag, max_id, step, description, updated_at, deleted_at FROM coordkit_idgen_segments"
		set  = "UPDATE coordkit_idgen_segments SET "
	)
	live := " WHERE biz_tag = ? AND deleted_at = 0"
	dead := " WHERE biz_tag = ? AND deleted_at <> 0"
	return &Store{
		db: db,
		// The CASE keeps every segment at least the configured step, whatever an instance asks.
		reserve: set + "max_id = max_id + CASE WHEN step > ? THEN step ELSE ? END," +
			" updated_at = " + d.NowMillis + live,
		readRow: cols + " WHERE biz_tag = ?",
		insert: d.InsertIgnore + " INTO coordkit_idgen_segments (biz_tag, max_id, step, description, updated_at)" +
			" VALUES (?, ?, ?, ?, " + d.NowMillis + ")" + d.OnConflictIgnore,
		list: cols + " WHERE deleted_at = 0 ORDER BY biz_tag",
		// A tombstone comes back to life where it stopped, or at a start at or above that.
		revive: set + "step = ?, description = ?, deleted_at = 0, updated_at = " + d.NowMillis + dead,
		reviveAt: set + "max_id = ?, step = ?, description = ?, deleted_at = 0, updated_at = " + d.NowMillis +
			dead + " AND max_id <= ?",
		update:      set + "step = ?, description = ?" + live,
		updateStep:  set + "step = ?" + live,
		updateDescr: set + "description = ?" + live,
		remove:      set + "deleted_at = " + d.NowMillis + live,
	}, nil
}

// addDeletedAt adds the deleted_at column to a table created before tags could be deleted.
// Instances starting together may race to add it: whoever loses finds it there.
func addDeletedAt(ctx context.Context, db *sqldb.DB) error {
	const probe = "SELECT deleted_at FROM coordkit_idgen_segments WHERE 1 = 0"
	if _, err := db.ExecContext(ctx, probe); err == nil {
		return nil
	}
	_, err := db.ExecContext(ctx, "ALTER TABLE coordkit_idgen_segments ADD COLUMN deleted_at "+db.Dialect.Int64+" NOT NULL DEFAULT 0")
	if err != nil {
		if _, perr := db.ExecContext(ctx, probe); perr != nil {
			return fmt.Errorf("segment: %s: add column deleted_at: %w", db.Dialect.Name, err)
		}
	}
	return nil
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

// Create inserts a tag whose first ID is start; start 0 means 1, or for a tag that was
// deleted, where it stopped. A tag that exists is ErrExists; a start below a deleted tag's
// max_id is a *BelowTombstone. Every step is one conditional statement, so a Create racing a
// Delete or another Create of the same name can never start below the tombstone.
func (s *Store) Create(ctx context.Context, tag string, start, step int64, description string) (Tag, error) {
	n, err := s.exec(ctx, s.insert, tag, max(start, 1), step, description)
	if err != nil {
		return Tag{}, err
	}
	if n == 0 { // the name is taken: by a live tag, or by a tombstone that can come back
		if start == 0 {
			n, err = s.exec(ctx, s.revive, step, description, tag)
		} else {
			n, err = s.exec(ctx, s.reviveAt, start, step, description, tag, start)
		}
		if err != nil {
			return Tag{}, err
		}
	}
	t, deleted, err := s.read(ctx, tag)
	if err != nil {
		return Tag{}, err
	}
	switch {
	case n > 0:
		return t, nil
	case deleted && start > 0:
		return Tag{}, &BelowTombstone{Tag: tag, Start: start, MaxID: t.MaxID}
	}
	return Tag{}, fmt.Errorf("%w: %q", ErrExists, tag)
}

// Update sets a live tag's step and description; nil leaves a field as it is. A new step
// bounds every reservation from the next one on (Reserve reads it in its transaction).
func (s *Store) Update(ctx context.Context, tag string, step *int64, description *string) (Tag, error) {
	var err error
	switch {
	case step != nil && description != nil:
		_, err = s.exec(ctx, s.update, *step, *description, tag)
	case step != nil:
		_, err = s.exec(ctx, s.updateStep, *step, tag)
	case description != nil:
		_, err = s.exec(ctx, s.updateDescr, *description, tag)
	}
	if err != nil {
		return Tag{}, err
	}
	// MySQL counts changed rows, not matched ones, so an update to the same values affects
	// none: the read decides whether the tag is there.
	t, deleted, err := s.read(ctx, tag)
	if errors.Is(err, ErrNotFound) || (err == nil && deleted) {
		return Tag{}, fmt.Errorf("%w: %q", ErrNotFound, tag)
	}
	return t, err
}

// Delete turns a live tag into a tombstone and returns it as it was deleted: its MaxID is the
// lowest start a tag created again under its name may have. Reservations after it are
// ErrNotFound; ranges reserved before it stay below MaxID.
func (s *Store) Delete(ctx context.Context, tag string) (Tag, error) {
	n, err := s.exec(ctx, s.remove, tag)
	if err != nil {
		return Tag{}, err
	}
	if n == 0 {
		return Tag{}, fmt.Errorf("%w: %q", ErrNotFound, tag)
	}
	// A CreateTag racing this call may revive the tag between the two statements; the read
	// then returns the revived row, whose max_id is at or above the tombstone's, so the answer
	// still never names a start below where the deleted tag stopped.
	t, _, err := s.read(ctx, tag)
	return t, err
}

// exec runs one statement and returns how many rows it changed.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, s.unavailable(ctx, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, s.unavailable(ctx, err)
	}
	return n, nil
}

// read returns tag's row, live or a tombstone; a tag that never existed is ErrNotFound.
func (s *Store) read(ctx context.Context, tag string) (Tag, bool, error) {
	t, deletedAt, err := scanRow(s.db.QueryRowContext(ctx, s.readRow, tag))
	if errors.Is(err, sql.ErrNoRows) {
		return Tag{}, false, fmt.Errorf("%w: %q", ErrNotFound, tag)
	}
	if err != nil {
		return Tag{}, false, s.unavailable(ctx, err)
	}
	return t, deletedAt != 0, nil
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
	t, _, err := scanRow(row)
	return t, err
}

// scanRow reads a row of cols: the tag and its deleted_at (0 for a live tag).
func scanRow(row interface{ Scan(...any) error }) (Tag, int64, error) {
	var t Tag
	var updated, deletedAt int64
	if err := row.Scan(&t.Tag, &t.MaxID, &t.Step, &t.Description, &updated, &deletedAt); err != nil {
		return Tag{}, 0, err
	}
	t.UpdatedAt = time.UnixMilli(updated).UTC()
	return t, deletedAt, nil
}

// unavailable wraps a database error as ErrUnavailable through the one shared mapping
// (server.Unavailable): when ctx ended, its cause is returned instead.
func (s *Store) unavailable(ctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("segment: %s: row vanished inside its transaction: %w", s.db.Dialect.Name, err)
	}
	return server.Unavailable(ctx, ErrUnavailable, s.db.Dialect.Name, err)
}
