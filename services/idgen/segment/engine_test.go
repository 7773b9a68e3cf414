package segment_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/block"
	"github.com/coordkit/coordkit/services/idgen/segment"
)

// dbs are the SQL engines the segment table runs on; each returns a fresh handle.
var dbs = []struct {
	name string
	open func(t *testing.T) *sqldb.DB
}{
	{"mysql", func(t *testing.T) *sqldb.DB {
		db, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), 8)
		noErr(t, err)
		t.Cleanup(func() { db.Close() })
		return db
	}},
	{"sqlite", func(t *testing.T) *sqldb.DB {
		db, err := sqldb.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "ids.db"))
		noErr(t, err)
		t.Cleanup(func() { db.Close() })
		return db
	}},
	{"postgres", func(t *testing.T) *sqldb.DB { return openPostgres(t, testenv.PostgresSchema(t)) }},
}

// openPostgres opens a handle on the tests' PostgreSQL database whose tables live in schema.
func openPostgres(t *testing.T, schema string) *sqldb.DB {
	t.Helper()
	db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 8})
	noErr(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// fakeClock is a clock the test moves; the engine reads it from its goroutines too.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newEngine(t *testing.T, db *sqldb.DB, clock func() time.Time) *segment.Engine {
	store, err := segment.NewStore(context.Background(), db)
	noErr(t, err)
	e := segment.New(store, segment.Config{Clock: clock})
	t.Cleanup(func() { e.Close() })
	return e
}

func state(t *testing.T, e *segment.Engine, tag string) segment.TagState {
	t.Helper()
	tags, err := e.Tags(context.Background())
	noErr(t, err)
	for _, s := range tags {
		if s.Tag.Tag == tag {
			return s
		}
	}
	t.Fatalf("tag %q not listed", tag)
	return segment.TagState{}
}

// waitNextLoaded polls the tag's state until its next segment is loaded.
func waitNextLoaded(t *testing.T, e *segment.Engine, tag string) segment.TagState {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if s := state(t, e, tag); s.Buffer.NextLoaded {
			return s
		}
	}
	t.Fatalf("next segment of %q not loaded within 5s", tag)
	return segment.TagState{}
}

func TestNextSegmentLoadsAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, d.open(t), nil)
			tag := testenv.Prefix(t)
			_, err := e.CreateTag(ctx, tag, 1, 1000, "")
			noErr(t, err)
			ids, err := e.Next(ctx, tag, 50)
			noErr(t, err)
			if ids[0] != 1 || ids[49] != 50 {
				t.Fatalf("first IDs %d..%d, want 1..50", ids[0], ids[49])
			}
			if s := state(t, e, tag); s.Buffer.NextLoaded || s.Buffer.Current != (block.Range{Start: 1, End: 1001}) {
				t.Fatalf("at 5%% used: state %+v, want current [1,1001) and no next", s.Buffer)
			}
			_, err = e.Next(ctx, tag, 60) // 11% used: the next segment loads in the background
			noErr(t, err)
			s := waitNextLoaded(t, e, tag)
			if s.Buffer.Position != 111 || s.Buffer.Next.Start < s.Buffer.Current.End {
				t.Fatalf("state %+v: want position 111 in the current segment and the next above it", s.Buffer)
			}
			// Running through the current segment switches to the loaded one without a gap.
			ids, err = e.Next(ctx, tag, 900)
			noErr(t, err)
			if ids[889] != 1000 || ids[890] != s.Buffer.Next.Start {
				t.Fatalf("IDs around the switch: %d then %d, want 1000 then %d", ids[889], ids[890], s.Buffer.Next.Start)
			}
		})
	}
}

func TestDynamicStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
			e := newEngine(t, d.open(t), clock.Now)
			tag := testenv.Prefix(t)
			_, err := e.CreateTag(ctx, tag, 1, 100, "")
			noErr(t, err)
			// Each segment used up within a minute: the step doubles with every load.
			want := []int64{100, 200, 400, 800}
			for i, w := range want {
				s := state(t, e, tag)
				if i > 0 {
					s = waitNextLoaded(t, e, tag)
					if got := s.Buffer.Next.End - s.Buffer.Next.Start; got != w {
						t.Fatalf("segment %d has %d IDs, want %d", i, got, w)
					}
					// Use the rest of the current segment and 10% of the next.
					_, err := e.Next(ctx, tag, int(s.Buffer.Current.End-s.Buffer.Position+w/10))
					noErr(t, err)
				} else {
					_, err := e.Next(ctx, tag, int(w/10))
					noErr(t, err)
				}
				clock.Add(time.Minute)
			}
			// A slow segment (over 30 minutes) halves the step, never below the configured one.
			s := waitNextLoaded(t, e, tag)
			clock.Add(31 * time.Minute)
			if s = state(t, e, tag); s.Buffer.Step != 800 {
				t.Fatalf("step after a slow segment = %d, want 1600/2 = 800", s.Buffer.Step)
			}
			clock.Add(-31 * time.Minute)
			if s = state(t, e, tag); s.Buffer.Step != 3200 {
				t.Fatalf("step after a fast segment = %d, want 3200", s.Buffer.Step)
			}
		})
	}
}

func TestLeafPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		step, min int64
		since     time.Duration
		want      int64
	}{
		{1000, 1000, time.Minute, 2000},
		{800_000, 1000, time.Minute, block.MaxStep},
		{4000, 1000, 20 * time.Minute, 4000},
		{4000, 1000, time.Hour, 2000},
		{1000, 1000, time.Hour, 1000},
	}
	for _, tt := range tests {
		if got := block.Leaf(tt.step, tt.min, tt.since); got != tt.want {
			t.Errorf("Leaf(%d, %d, %v) = %d, want %d", tt.step, tt.min, tt.since, got, tt.want)
		}
	}
}

func TestUnknownAndDuplicateTag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEngine(t, dbs[1].open(t), nil)
	if _, err := e.Next(ctx, "missing", 1); !errors.Is(err, segment.ErrNotFound) {
		t.Fatalf("Next on a missing tag = %v, want ErrNotFound", err)
	}
	_, err := e.CreateTag(ctx, "t", 1, 10, "")
	noErr(t, err)
	if _, err := e.CreateTag(ctx, "t", 1, 10, ""); !errors.Is(err, segment.ErrExists) {
		t.Fatalf("second CreateTag = %v, want ErrExists", err)
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}
