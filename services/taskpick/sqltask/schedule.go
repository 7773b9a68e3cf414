package sqltask

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/taskpick"
)

// scheduleTable holds every schedule of every pool, one row per (pool, name): its spec and
// zone, its task template, its missed-tick policy, paused, and next_fire and last_fire in
// Unix milliseconds (next_fire NULL while paused or when the spec has no tick left). Due
// schedules are found through the index on next_fire. A fire is one transaction that locks
// due rows (skipping rows another instance has locked), moves each row's next_fire on from
// the value it read, and puts the tick's task in coordkit_tasks.
const scheduleTable = "coordkit_task_schedules"

// scheduleSchema creates the schedule table and its index; every statement is idempotent.
func scheduleSchema(d sqldb.Dialect) []string {
	cols := `
		pool         ` + d.Key + ` NOT NULL,
		name         ` + d.Key + ` NOT NULL,
		spec         ` + d.Key + ` NOT NULL,
		timezone     ` + d.Key + ` NOT NULL,
		payload      ` + d.Blob + ` NOT NULL,
		priority     ` + d.Int64 + ` NOT NULL,
		max_attempts ` + d.Int64 + ` NOT NULL,
		missed       ` + d.Int64 + ` NOT NULL,
		paused       ` + d.Int64 + ` NOT NULL DEFAULT 0,
		next_fire    ` + d.Int64 + `,
		last_fire    ` + d.Int64 + ` NOT NULL DEFAULT 0,
		PRIMARY KEY (pool, name)`
	if d.Name == "mysql" {
		return []string{`CREATE TABLE IF NOT EXISTS ` + scheduleTable + ` (` + cols + `,
		INDEX coordkit_task_schedules_due (next_fire)
	)` + d.TableOptions}
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + scheduleTable + ` (` + cols + `
	)` + d.TableOptions,
		`CREATE INDEX IF NOT EXISTS coordkit_task_schedules_due ON ` + scheduleTable + ` (next_fire)`,
	}
}

// scheduleCols are the columns a Schedule is read from (scanSchedule).
const scheduleCols = "pool, name, spec, timezone, payload, priority, max_attempts, missed, paused, next_fire, last_fire"

type scanner interface{ Scan(...any) error }

func scanSchedule(r scanner) (taskpick.Schedule, error) {
	var s taskpick.Schedule
	var missed, paused, last int64
	var next sql.NullInt64
	err := r.Scan(&s.Pool, &s.Name, &s.Spec, &s.Timezone, &s.Payload, &s.Priority, &s.MaxAttempts, &missed, &paused, &next, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return s, taskpick.ErrScheduleNotFound
	}
	s.Missed, s.Paused = taskpick.Missed(missed), paused == 1
	if next.Valid {
		s.NextFire = fromMillis(next.Int64)
	}
	if last != 0 {
		s.LastFire = fromMillis(last)
	}
	return s, err
}

// millisOrNull is t as a next_fire: NULL for the zero time.
func millisOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func millisOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// getScheduleIn reads a schedule within tx, locking its row where lock says so.
func (b *Backend) getScheduleIn(ctx context.Context, tx *sql.Tx, pool, name string, lock bool) (taskpick.Schedule, error) {
	q := "SELECT " + scheduleCols + " FROM " + scheduleTable + " WHERE pool = ? AND name = ?"
	if lock {
		q += b.d.ForUpdate
	}
	return scanSchedule(tx.QueryRowContext(ctx, q, pool, name))
}

// PutSchedule implements taskpick.ScheduleStore: an insert that does nothing when the
// schedule exists, else an update of the locked row that keeps its paused state, and its next
// fire when the spec and zone are the same.
func (b *Backend) PutSchedule(ctx context.Context, s taskpick.Schedule) (taskpick.Schedule, bool, error) {
	var stored taskpick.Schedule
	var created bool
	err := b.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, b.d.InsertIgnore+" INTO "+scheduleTable+" ("+scheduleCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 0)"+b.d.OnConflictIgnore,
			s.Pool, s.Name, s.Spec, s.Timezone, nonNil(s.Payload), s.Priority, s.MaxAttempts, int64(s.Missed), millisOrNull(s.NextFire))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		created = n == 1
		if !created {
			old, err := b.getScheduleIn(ctx, tx, s.Pool, s.Name, true)
			if err != nil {
				return err
			}
			next := millisOrNull(s.NextFire)
			switch {
			case old.Paused:
				next = nil
			case old.Spec == s.Spec && old.Timezone == s.Timezone && !old.NextFire.IsZero():
				next = old.NextFire.UnixMilli() // the same ticks: a due one not fired yet stays due
			}
			if _, err := tx.ExecContext(ctx, "UPDATE "+scheduleTable+" SET spec = ?, timezone = ?, payload = ?, priority = ?, max_attempts = ?, missed = ?, next_fire = ? WHERE pool = ? AND name = ?",
				s.Spec, s.Timezone, nonNil(s.Payload), s.Priority, s.MaxAttempts, int64(s.Missed), next, s.Pool, s.Name); err != nil {
				return err
			}
		}
		stored, err = b.getScheduleIn(ctx, tx, s.Pool, s.Name, false)
		return err
	})
	if err != nil {
		return taskpick.Schedule{}, false, b.fail(ctx, err)
	}
	return stored, created, nil
}

// GetSchedule implements taskpick.ScheduleStore.
func (b *Backend) GetSchedule(ctx context.Context, pool, name string) (taskpick.Schedule, error) {
	s, err := scanSchedule(b.db.QueryRowContext(ctx, "SELECT "+scheduleCols+" FROM "+scheduleTable+" WHERE pool = ? AND name = ?", pool, name))
	if err != nil && !errors.Is(err, taskpick.ErrScheduleNotFound) {
		return s, b.fail(ctx, err)
	}
	return s, err
}

// ListSchedules implements taskpick.ScheduleStore.
func (b *Backend) ListSchedules(ctx context.Context, pool, after string, limit int) ([]taskpick.Schedule, error) {
	rows, err := b.db.QueryContext(ctx, "SELECT "+scheduleCols+" FROM "+scheduleTable+" WHERE pool = ? AND name > ? ORDER BY name LIMIT ?", pool, after, limit)
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	defer rows.Close()
	var out []taskpick.Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, b.fail(ctx, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, b.fail(ctx, err)
	}
	return out, nil
}

// PauseSchedule implements taskpick.ScheduleStore.
func (b *Backend) PauseSchedule(ctx context.Context, pool, name string) (taskpick.Schedule, error) {
	var s taskpick.Schedule
	err := b.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE "+scheduleTable+" SET paused = 1, next_fire = NULL WHERE pool = ? AND name = ?", pool, name); err != nil {
			return err
		}
		var err error
		s, err = b.getScheduleIn(ctx, tx, pool, name, false)
		return err
	})
	return s, b.failUnless(ctx, err, taskpick.ErrScheduleNotFound)
}

// ResumeSchedule implements taskpick.ScheduleStore: the row is locked while next reads it.
func (b *Backend) ResumeSchedule(ctx context.Context, pool, name string, next func(taskpick.Schedule) time.Time) (taskpick.Schedule, error) {
	var s taskpick.Schedule
	err := b.tx(ctx, func(tx *sql.Tx) error {
		var err error
		s, err = b.getScheduleIn(ctx, tx, pool, name, true)
		if err != nil || !s.Paused {
			return err
		}
		s.Paused, s.NextFire = false, next(s)
		_, err = tx.ExecContext(ctx, "UPDATE "+scheduleTable+" SET paused = 0, next_fire = ? WHERE pool = ? AND name = ?", millisOrNull(s.NextFire), pool, name)
		return err
	})
	return s, b.failUnless(ctx, err, taskpick.ErrScheduleNotFound)
}

// DeleteSchedule implements taskpick.ScheduleStore.
func (b *Backend) DeleteSchedule(ctx context.Context, pool, name string) error {
	res, err := b.db.ExecContext(ctx, "DELETE FROM "+scheduleTable+" WHERE pool = ? AND name = ?", pool, name)
	if err != nil {
		return b.fail(ctx, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return b.fail(ctx, err)
	} else if n == 0 {
		return taskpick.ErrScheduleNotFound
	}
	return nil
}

// FireDue implements taskpick.ScheduleStore: a read outside any transaction finds whether
// anything is due (most passes find nothing, and on SQLite a write transaction locks the
// file); then one transaction locks up to limit due rows, skipping those another instance
// holds, moves each on from the next_fire it read, and puts the fires' tasks.
func (b *Backend) FireDue(ctx context.Context, now time.Time, limit int, plan func(taskpick.Schedule) taskpick.Fire) ([]taskpick.Fired, error) {
	var one int
	err := b.db.QueryRowContext(ctx, "SELECT 1 FROM "+scheduleTable+" WHERE next_fire <= ? LIMIT 1", now.UnixMilli()).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	var out []taskpick.Fired
	err = b.tx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, "SELECT "+scheduleCols+" FROM "+scheduleTable+
			" WHERE next_fire <= ? ORDER BY next_fire LIMIT ?"+b.d.SkipLocked, now.UnixMilli(), limit)
		if err != nil {
			return err
		}
		var due []taskpick.Schedule
		for rows.Next() {
			s, err := scanSchedule(rows)
			if err != nil {
				rows.Close()
				return err
			}
			due = append(due, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, s := range due {
			f := plan(s)
			res, err := tx.ExecContext(ctx, "UPDATE "+scheduleTable+" SET next_fire = ?, last_fire = ? WHERE pool = ? AND name = ? AND next_fire = ? AND paused = 0",
				millisOrNull(f.Next), millisOrZero(f.Fired), s.Pool, s.Name, s.NextFire.UnixMilli())
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				continue
			}
			fired := taskpick.Fired{Pool: s.Pool, Name: s.Name}
			if f.Task != nil {
				created, err := b.putIn(ctx, tx, s.Pool, []taskpick.NewTask{*f.Task})
				if err != nil {
					return err
				}
				fired.Created = created[0].Created
			}
			out = append(out, fired)
		}
		return nil
	})
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	return out, nil
}

// failUnless maps err as fail does, except the sentinel want, which passes as it is.
func (b *Backend) failUnless(ctx context.Context, err, want error) error {
	if err == nil || errors.Is(err, want) {
		return err
	}
	return b.fail(ctx, err)
}
