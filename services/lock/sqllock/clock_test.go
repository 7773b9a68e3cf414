package sqllock

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/clock"
	"github.com/coordkit/coordkit/libs/sqldb"
)

// openAt opens a SQLite lock backend on path whose database clock is a steady clock started
// now on src, as a process started now would.
func openAt(t *testing.T, path string, src clock.Source) *Backend {
	t.Helper()
	ctx := context.Background()
	db, err := sqldb.OpenSQLite(ctx, path, sqldb.WithClock(clock.NewSteady(src)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx, db, Config{ReclaimInterval: Off})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	b.owned = db
	t.Cleanup(func() { b.Close() })
	return b
}

// rivalBlocked asserts that a rival cannot take key now, and that Inspect shows it held.
func rivalBlocked(t *testing.T, b *Backend, key, when string) {
	t.Helper()
	ctx := context.Background()
	att, err := b.TryAcquire(ctx, key, "rival", 30*time.Second)
	if err != nil {
		t.Fatalf("%s: rival TryAcquire: %v", when, err)
	}
	if att.Acquired {
		t.Fatalf("%s: a rival took the lock with token %d while the holder's lease was live", when, att.Lease.FencingToken)
	}
	if st, err := b.Inspect(ctx, key); err != nil || !st.Held {
		t.Fatalf("%s: Inspect = %+v, %v; want held", when, st, err)
	}
}

// rivalTakes asserts that a rival takes key now, with token want.
func rivalTakes(t *testing.T, b *Backend, key string, want uint64, when string) {
	t.Helper()
	att, err := b.TryAcquire(context.Background(), key, "rival", 30*time.Second)
	if err != nil || !att.Acquired || att.Lease.FencingToken != want {
		t.Fatalf("%s: rival TryAcquire = %+v, %v; want acquired with token %d", when, att, err, want)
	}
}

// TestSQLiteLeaseSurvivesWallClockSteps steps the wall clock +1h and then −2h under a held
// 30s lease: the embedded store times leases on the monotonic clock, so the rival gets the
// lock only once 30s of monotonic time have passed, whatever the wall clock says.
func TestSQLiteLeaseSurvivesWallClockSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := clock.NewFake(time.Now())
	b := openAt(t, filepath.Join(t.TempDir(), "locks.db"), f)
	const key = "clock:step"
	att, err := b.TryAcquire(ctx, key, "holder", 30*time.Second)
	if err != nil || !att.Acquired || att.Lease.FencingToken != 1 {
		t.Fatalf("holder: %+v, %v", att, err)
	}
	f.Advance(time.Second)
	f.Step(time.Hour)
	rivalBlocked(t, b, key, "1s in, wall clock +1h")
	if _, err := b.Renew(ctx, key, "holder", 0); err != nil {
		t.Fatalf("holder's renewal after the step: %v", err)
	}
	f.Step(-2 * time.Hour)
	rivalBlocked(t, b, key, "wall clock then −2h")
	f.Advance(29 * time.Second)
	rivalBlocked(t, b, key, "29s after the renewal")
	f.Advance(1100 * time.Millisecond)
	rivalTakes(t, b, key, 2, "30.1s after the renewal")
}

// TestSQLiteLeaseSurvivesStepWhileDown stops the service under a held lease, steps the wall
// clock while it is down and starts it again: every lease found keeps its whole ttl from the
// start, so a step forward does not end it and a step back does not make it last for the
// length of the step.
func TestSQLiteLeaseSurvivesStepWhileDown(t *testing.T) {
	t.Parallel()
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "locks.db")
			f := clock.NewFake(time.Now())
			b := openAt(t, path, f)
			const key = "clock:restart"
			if att, err := b.TryAcquire(ctx, key, "holder", 30*time.Second); err != nil || !att.Acquired {
				t.Fatalf("holder: %+v, %v", att, err)
			}
			f.Advance(10 * time.Second)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			f.Advance(2 * time.Second) // down
			f.Step(step)
			b = openAt(t, path, f) // a new process: its steady clock starts at the stepped wall clock
			rivalBlocked(t, b, key, "at the restart")
			f.Advance(29 * time.Second)
			rivalBlocked(t, b, key, "29s after the restart")
			f.Advance(1100 * time.Millisecond)
			rivalTakes(t, b, key, 2, "30.1s after the restart")
		})
	}
}
