package sqldb

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/clock"
)

// TestSQLiteSynchronousFullOnEveryConnection reads the synchronous setting back from several
// connections of one handle at once (the pool opens new ones as it needs them): each must be
// FULL (2), so that every acknowledged commit has been synced to disk. NORMAL (1), in WAL
// mode, lets a power loss roll back the last commits.
func TestSQLiteSynchronousFullOnEveryConnection(t *testing.T) {
	ctx := context.Background()
	db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "ids.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(4) // more connections than OpenSQLite keeps, each opened anew
	var conns []*sql.Conn
	for range 4 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		var sync int
		var mode string
		if err := c.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if sync != 2 || mode != "wal" {
			t.Errorf("connection %d: synchronous = %d, journal_mode = %s; want 2 (FULL), wal", i, sync, mode)
		}
		var now int64
		if err := c.QueryRowContext(ctx, "SELECT "+db.Dialect.NowMillis).Scan(&now); err != nil {
			t.Errorf("connection %d: %s: %v", i, db.Dialect.NowMillis, err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
}

// TestSQLiteWithSynchronous: NORMAL only when asked for, on that handle alone, and a typo
// is refused rather than silently meaning either.
func TestSQLiteWithSynchronous(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		mode string
		want int
	}{{"normal", 1}, {"FULL", 2}, {"", 2}} {
		mode, err := ParseSynchronous(tc.mode)
		if err != nil {
			t.Fatal(err)
		}
		db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "a.db"), WithSynchronous(mode))
		if err != nil {
			t.Fatal(err)
		}
		var sync int
		if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil || sync != tc.want {
			t.Errorf("WithSynchronous(%q): synchronous = %d, %v; want %d", tc.mode, sync, err, tc.want)
		}
		db.Close()
		// The option is the handle's: a database opened without it is FULL.
		plain, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "b.db"))
		if err != nil {
			t.Fatal(err)
		}
		if err := plain.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
			t.Errorf("after WithSynchronous(%q), a plain handle: synchronous = %d, %v; want 2", tc.mode, sync, err)
		}
		plain.Close()
	}
	if _, err := ParseSynchronous("off"); err == nil {
		t.Fatal(`ParseSynchronous("off") accepted`)
	}
	if db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "c.db"), WithSynchronous("off")); err == nil {
		db.Close()
		t.Fatal(`WithSynchronous("off") opened a database`)
	}
}

// TestSQLiteClockIgnoresWallSteps: the database's clock (Dialect.NowMillis) is the handle's
// steady clock, which a step of the wall clock either way does not move.
func TestSQLiteClockIgnoresWallSteps(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	f := clock.NewFake(start)
	db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "c.db"), WithClock(clock.NewSteady(f)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	read := func() int64 {
		var ms int64
		if err := db.QueryRowContext(ctx, "SELECT "+db.Dialect.NowMillis).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	f.Advance(250 * time.Millisecond)
	f.Step(time.Hour)
	if got, want := read(), start.Add(250*time.Millisecond).UnixMilli(); got != want {
		t.Fatalf("after +1h: now = %d, want %d", got, want)
	}
	f.Step(-2 * time.Hour)
	f.Advance(time.Second)
	if got, want := read(), start.Add(1250*time.Millisecond).UnixMilli(); got != want {
		t.Fatalf("after -1h: now = %d, want %d", got, want)
	}
}

// TestSQLiteClockShift: a handle tells, once, how far its clock is ahead of the last mark the
// previous handle on the file left at Close, a step of the wall clock in between included.
func TestSQLiteClockShift(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "d.db")
	f := clock.NewFake(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	open := func() *DB {
		db, err := OpenSQLite(ctx, path, WithClock(clock.NewSteady(f)))
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	if _, ok := db.TakeClockShift(); ok {
		t.Fatal("a new database reported a clock shift")
	}
	f.Advance(3 * time.Second)
	db.Close()
	f.Advance(2 * time.Second)
	f.Step(-time.Hour)
	db = open()
	defer db.Close()
	if shift, ok := db.TakeClockShift(); !ok || shift != 2*time.Second-time.Hour {
		t.Fatalf("TakeClockShift = %v, %v; want %v", shift, ok, 2*time.Second-time.Hour)
	}
	if _, ok := db.TakeClockShift(); ok {
		t.Fatal("the shift was handed out twice")
	}
}
