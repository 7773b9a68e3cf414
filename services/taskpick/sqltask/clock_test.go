package sqltask_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/clock"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// openAt opens a SQLite task backend on path whose database clock is a steady clock started
// now on src, as a process started now would, and returns it with the function that stops
// that "process".
func openAt(t *testing.T, path string, src clock.Source) (*sqltask.Backend, func() error) {
	t.Helper()
	ctx := context.Background()
	db, err := sqldb.OpenSQLite(ctx, path, sqldb.WithClock(clock.NewSteady(src)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqltask.New(ctx, db, sqltask.Config{})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	stop := func() error { return errors.Join(b.Close(), db.Close()) }
	t.Cleanup(func() { stop() })
	return b, stop
}

// leased says how many of pool's tasks are leased after a sweep: a sweep returns every task
// whose lease ended.
func leased(t *testing.T, b *sqltask.Backend, pool string) uint64 {
	t.Helper()
	if _, err := b.Sweep(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	st, err := b.Stats(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return st.Leased
}

// pickOne puts a task in pool and picks it with a 30s lease.
func pickOne(t *testing.T, b *sqltask.Backend, pool string) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.Put(ctx, pool, []taskpick.NewTask{{ID: "a", MaxAttempts: 5}}); err != nil {
		t.Fatal(err)
	}
	p, err := b.Pick(ctx, pool, taskpick.PickSpec{N: 1, TTL: 30 * time.Second, Order: taskpick.FIFO,
		Digests: []string{taskpick.LeaseDigest("clock")}, MaxBytes: taskpick.DefaultMaxAnswerBytes})
	if err != nil || len(p.Tasks) != 1 {
		t.Fatalf("Pick = %+v, %v", p, err)
	}
}

// TestSQLiteTaskLeaseSurvivesWallClockSteps steps the wall clock +1h, then −2h, under a 30s
// task lease: the sweep must not take the task back before 30s of monotonic time.
func TestSQLiteTaskLeaseSurvivesWallClockSteps(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(time.Now())
	b, _ := openAt(t, filepath.Join(t.TempDir(), "tasks.db"), f)
	const pool = "clock-step"
	pickOne(t, b, pool)
	f.Advance(time.Second)
	f.Step(time.Hour)
	if n := leased(t, b, pool); n != 1 {
		t.Fatalf("1s in, wall clock +1h: %d leased, want 1 (the lease ended early)", n)
	}
	f.Step(-2 * time.Hour)
	f.Advance(28 * time.Second)
	if n := leased(t, b, pool); n != 1 {
		t.Fatalf("29s in, wall clock −1h: %d leased, want 1", n)
	}
	f.Advance(1100 * time.Millisecond)
	if n := leased(t, b, pool); n != 0 {
		t.Fatalf("30.1s in: %d leased, want 0", n)
	}
}

// TestSQLiteTaskLeaseSurvivesStepWhileDown stops the service 10s into a 30s task lease,
// steps the wall clock while it is down, and starts it again: the lease keeps the 20s it had
// left (not ending at once after a step forward, not lasting an hour more after a step back).
func TestSQLiteTaskLeaseSurvivesStepWhileDown(t *testing.T) {
	t.Parallel()
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "tasks.db")
			f := clock.NewFake(time.Now())
			b, stop := openAt(t, path, f)
			const pool = "clock-restart"
			pickOne(t, b, pool)
			f.Advance(10 * time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			f.Advance(5 * time.Second) // down
			f.Step(step)
			b, _ = openAt(t, path, f)
			if n := leased(t, b, pool); n != 1 {
				t.Fatalf("at the restart: %d leased, want 1 (the lease ended early)", n)
			}
			f.Advance(19 * time.Second)
			if n := leased(t, b, pool); n != 1 {
				t.Fatalf("19s after the restart: %d leased, want 1", n)
			}
			f.Advance(1100 * time.Millisecond)
			if n := leased(t, b, pool); n != 0 {
				t.Fatalf("20.1s after the restart: %d leased, want 0", n)
			}
		})
	}
}
