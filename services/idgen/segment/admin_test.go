package segment_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/segment"
)

func ptr[T any](v T) *T { return &v }

// TestDeleteTagNeverReissues attacks the tombstone: an instance holds buffered segments of a
// tag while another deletes and re-creates it, with start unset and with a start below the
// old max_id. Every ID either instance hands out must be unique, and the re-created tag must
// start where the deleted one stopped.
func TestDeleteTagNeverReissues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			a, b := newEngine(t, db, nil), newEngine(t, db, nil)
			tag := testenv.Prefix(t)
			_, err := a.CreateTag(ctx, tag, 1, 100, "")
			noErr(t, err)
			seen := map[int64]string{}
			take := func(e *segment.Engine, who string, n int) error {
				ids, err := e.Next(ctx, tag, n)
				for _, id := range ids {
					if prev, dup := seen[id]; dup {
						t.Fatalf("ID %d issued twice (%s, then %s)", id, prev, who)
					}
					seen[id] = who
				}
				return err
			}
			noErr(t, take(a, "a before delete", 20)) // a buffers [1,101) and loads the next
			waitNextLoaded(t, a, tag)
			noErr(t, take(b, "b before delete", 5)) // b buffers a segment above a's
			top := state(t, b, tag).Buffer.Current.End

			gone, err := b.DeleteTag(ctx, tag)
			noErr(t, err)
			if gone.MaxID != top {
				t.Fatalf("deleted tag's max_id = %d, want %d, the end of the last reserved segment", gone.MaxID, top)
			}
			// b drops what it buffered: none of it comes out after the delete.
			if _, err := b.Next(ctx, tag, 1); !errors.Is(err, segment.ErrNotFound) {
				t.Fatalf("Next on the deleting instance after DeleteTag = %v, want ErrNotFound", err)
			}
			if _, err := b.DeleteTag(ctx, tag); !errors.Is(err, segment.ErrNotFound) {
				t.Fatalf("second DeleteTag = %v, want ErrNotFound", err)
			}
			if _, err := b.UpdateTag(ctx, tag, ptr[int64](5), nil); !errors.Is(err, segment.ErrNotFound) {
				t.Fatalf("UpdateTag of a deleted tag = %v, want ErrNotFound", err)
			}
			tags, err := b.Tags(ctx)
			noErr(t, err)
			for _, s := range tags {
				if s.Tag.Tag == tag {
					t.Fatalf("ListTags still lists the deleted tag: %+v", s)
				}
			}

			// A start below the tombstone is refused, whatever the race: IDs below it exist.
			var below *segment.BelowTombstone
			if _, err := b.CreateTag(ctx, tag, top-1, 100, ""); !errors.As(err, &below) || below.MaxID != top {
				t.Fatalf("CreateTag(start %d) of a deleted tag = %v, want BelowTombstone at %d", top-1, err, top)
			}
			again, err := b.CreateTag(ctx, tag, 0, 100, "again")
			noErr(t, err)
			if again.MaxID != top || again.Description != "again" {
				t.Fatalf("re-created tag = %+v, want max_id %d (where the deleted one stopped)", again.Tag, top)
			}
			if _, err := b.CreateTag(ctx, tag, 0, 100, ""); !errors.Is(err, segment.ErrExists) {
				t.Fatalf("CreateTag of a live re-created tag = %v, want ErrExists", err)
			}

			// a still holds IDs below the tombstone; both run on without a duplicate.
			for range 10 {
				noErr(t, take(a, "a", 37))
				noErr(t, take(b, "b", 41))
			}
			if len(seen) != 25+10*(37+41) {
				t.Fatalf("%d distinct IDs, want %d", len(seen), 25+10*(37+41))
			}
		})
	}
}

// TestCreateAboveTombstone pins that an explicit start at or above a deleted tag's max_id is
// taken as asked.
func TestCreateAboveTombstone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, d.open(t), nil)
			tag := testenv.Prefix(t)
			_, err := e.CreateTag(ctx, tag, 500, 10, "")
			noErr(t, err)
			_, err = e.Next(ctx, tag, 1)
			noErr(t, err)
			_, err = e.DeleteTag(ctx, tag)
			noErr(t, err)
			s, err := e.CreateTag(ctx, tag, 10_000, 10, "")
			noErr(t, err)
			ids, err := e.Next(ctx, tag, 1)
			noErr(t, err)
			// The first Next may have started background reservations that land after the
			// re-create and take ranges of their own (before CreateTag reads its answer, even),
			// so max_id and the first ID are 10000 or a later segment's: never below the start.
			if s.MaxID < 10_000 || ids[0] < 10_000 {
				t.Fatalf("re-created at 10000: max_id %d, first ID %d, want both >= 10000", s.MaxID, ids[0])
			}
		})
	}
}

// TestUpdateTag pins that a new step bounds the next reservation (of any instance), that
// buffered segments are handed out as reserved, and that an update to the same values (which
// MySQL counts as no changed row) is not taken for a missing tag.
func TestUpdateTag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, d.open(t), nil)
			tag := testenv.Prefix(t)
			_, err := e.CreateTag(ctx, tag, 1, 100, "old")
			noErr(t, err)
			_, err = e.Next(ctx, tag, 1) // buffers [1,101)
			noErr(t, err)

			s, err := e.UpdateTag(ctx, tag, ptr[int64](5000), nil)
			noErr(t, err)
			if s.Step != 5000 || s.Description != "old" {
				t.Fatalf("after UpdateTag(step 5000): %+v, want step 5000 and the old description", s.Tag)
			}
			if s.Buffer.Current.End != 101 {
				t.Fatalf("buffered segment after UpdateTag = %+v, want [1,101) unchanged", s.Buffer.Current)
			}
			s, err = e.UpdateTag(ctx, tag, nil, ptr(""))
			noErr(t, err)
			if s.Step != 5000 || s.Description != "" {
				t.Fatalf("after UpdateTag(description \"\"): %+v", s.Tag)
			}
			_, err = e.UpdateTag(ctx, tag, ptr[int64](5000), ptr(""))
			noErr(t, err) // nothing changes: still found

			// Using 10% of the buffered segment loads the next one, at the new step.
			_, err = e.Next(ctx, tag, 20)
			noErr(t, err)
			s = waitNextLoaded(t, e, tag)
			if got := s.Buffer.Next.End - s.Buffer.Next.Start; got < 5000 {
				t.Fatalf("segment after the update has %d IDs, want at least the new step 5000", got)
			}
			if s.Buffer.Current.End != 101 {
				t.Fatalf("current segment %+v, want [1,101): reserved before the update", s.Buffer.Current)
			}
			if _, err := e.UpdateTag(ctx, "never-created-"+tag, ptr[int64](1), nil); !errors.Is(err, segment.ErrNotFound) {
				t.Fatalf("UpdateTag of a missing tag = %v, want ErrNotFound", err)
			}
		})
	}
}

// TestSchemaGainsDeletedAt opens stores on a table created before tags could be deleted,
// several at once as instances starting together would: the column is added, the old rows
// are live, and every store finds it there.
func TestSchemaGainsDeletedAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dbs {
		if d.name == "mysql" {
			continue // the shared database's table has the column already
		}
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			k := db.Dialect
			_, err := db.ExecContext(ctx, `CREATE TABLE coordkit_idgen_segments (
				biz_tag `+k.Key+` NOT NULL PRIMARY KEY, max_id `+k.Int64+` NOT NULL, step `+k.Int64+` NOT NULL,
				description `+k.Text+` NOT NULL DEFAULT '', updated_at `+k.Int64+` NOT NULL)`)
			noErr(t, err)
			_, err = db.ExecContext(ctx, `INSERT INTO coordkit_idgen_segments VALUES ('old', 42, 10, 'kept', 0)`)
			noErr(t, err)
			stores := make([]*segment.Store, 4)
			errs := make([]error, len(stores))
			var wg sync.WaitGroup
			for i := range stores {
				wg.Go(func() { stores[i], errs[i] = segment.NewStore(ctx, db) })
			}
			wg.Wait()
			for _, err := range errs {
				noErr(t, err)
			}
			e := segment.New(stores[0], segment.Config{})
			t.Cleanup(func() { e.Close() })
			ids, err := e.Next(ctx, "old", 1)
			noErr(t, err)
			if ids[0] != 42 {
				t.Fatalf("first ID of the old tag = %d, want 42", ids[0])
			}
			_, err = e.DeleteTag(ctx, "old")
			noErr(t, err)
		})
	}
}
