package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// clockTable holds one row: the last reading of the clock of the process that had the
// database open, written every second while it runs.
const clockTable = "coordkit_clock"

// clockMarks keeps a SQLite database's clock mark current and remembers the mark an
// earlier process left.
type clockMarks struct {
	stop func()

	mu    sync.Mutex
	shift time.Duration // now − the earlier process's last mark
	found bool          // an earlier process left a mark, not yet taken
}

// startClockMarks reads the mark an earlier process left, writes this process's, and keeps
// writing it every interval until Close.
func (db *DB) startClockMarks(ctx context.Context, every time.Duration) error {
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+clockTable+
		" (id INTEGER PRIMARY KEY CHECK (id = 0), now_ms INTEGER NOT NULL)"); err != nil {
		return err
	}
	m := &clockMarks{}
	var last int64
	err := db.QueryRowContext(ctx, "SELECT now_ms FROM "+clockTable+" WHERE id = 0").Scan(&last)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		m.found = true
		m.shift = time.Duration(db.Clock.UnixMilli()-last) * time.Millisecond
	}
	mark := func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "INSERT INTO "+clockTable+" (id, now_ms) VALUES (0, ?)"+
			" ON CONFLICT (id) DO UPDATE SET now_ms = excluded.now_ms", db.Clock.UnixMilli())
		return err
	}
	if err := mark(ctx); err != nil {
		return err
	}
	bg, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		failing := false // warned of, until a mark is written again
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
				err := mark(bg)
				switch {
				case err != nil && bg.Err() == nil && !failing:
					slog.Warn("sqldb: could not write the clock mark; a restart then keeps task leases longer", "error", err)
					failing = true
				case err == nil:
					failing = false
				}
			}
		}
	}()
	var once sync.Once
	m.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			if err := mark(context.Background()); err != nil { // the last reading, for the next process
				slog.Warn("sqldb: could not write the clock mark", "error", err)
			}
		})
	}
	db.marks = m
	return nil
}

// TakeClockShift returns, once per handle, how far this process's clock is ahead of the last
// clock mark an earlier process left in the database (the time it was down, plus any step of
// the wall clock meanwhile, either way), and whether there was one. A service whose leases
// are timed on the process clock (Dialect.ProcessClock) moves the leases it finds by shift:
// each then has at least the time it had left when the earlier process last wrote its mark,
// up to a second before it stopped, however the wall clock moved while nobody watched it.
// Later calls, and handles without marks (MySQL), return 0, false.
func (db *DB) TakeClockShift() (shift time.Duration, ok bool) {
	if db.marks == nil {
		return 0, false
	}
	db.marks.mu.Lock()
	defer db.marks.mu.Unlock()
	shift, ok = db.marks.shift, db.marks.found
	db.marks.found = false
	return shift, ok
}

// Close stops the clock marks, if any, writing the last one, and closes the database.
func (db *DB) Close() error {
	if db.marks != nil {
		db.marks.stop()
	}
	return db.DB.Close()
}
