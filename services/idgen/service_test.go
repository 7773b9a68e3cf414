package idgen_test

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
)

func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// No Redis: MODE_REDIS_INCR is not configured on this instance.
	inst := startInstance(t, stores[1].open(t))
	c := inst.client
	tag := "orders"
	_, err := c.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag, Start: 100, Step: 10})
	noErr(t, err)

	next := func(mode idgenv1.Mode, tag string, count uint32) func() error {
		return func() error {
			_, err := c.Next(ctx, &idgenv1.NextRequest{Mode: mode, Tag: tag, Count: count})
			return err
		}
	}
	decode := func(id string) func() error {
		return func() error {
			_, err := c.Decode(ctx, &idgenv1.DecodeRequest{Id: id})
			return err
		}
	}
	create := func(req *idgenv1.CreateTagRequest) func() error {
		return func() error {
			_, err := c.CreateTag(ctx, req)
			return err
		}
	}
	future := strconv.FormatInt(snowflake.Compose(time.Now().Add(time.Hour).UnixMilli()-snowflake.Epoch, 1, 1), 10)
	tests := []struct {
		name  string
		call  func() error
		code  connect.Code
		field string
	}{
		{"mode unspecified", next(idgenv1.Mode_MODE_UNSPECIFIED, "", 1), connect.CodeInvalidArgument, "mode"},
		{"mode unknown", next(idgenv1.Mode(99), "", 1), connect.CodeInvalidArgument, "mode"},
		{"mode not configured", next(idgenv1.Mode_MODE_REDIS_INCR, tag, 1), connect.CodeInvalidArgument, "mode"},
		{"count 0", next(idgenv1.Mode_MODE_SEGMENT, tag, 0), connect.CodeInvalidArgument, "count"},
		{"count over limit", next(idgenv1.Mode_MODE_SNOWFLAKE, "", 10001), connect.CodeInvalidArgument, "count"},
		{"segment empty tag", next(idgenv1.Mode_MODE_SEGMENT, "", 1), connect.CodeInvalidArgument, "tag"},
		{"segment long tag", next(idgenv1.Mode_MODE_SEGMENT, strings.Repeat("t", 129), 1), connect.CodeInvalidArgument, "tag"},
		{"segment control char", next(idgenv1.Mode_MODE_SEGMENT, "a\nb", 1), connect.CodeInvalidArgument, "tag"},
		{"uuid with tag", next(idgenv1.Mode_MODE_UUID_V4, tag, 1), connect.CodeInvalidArgument, "tag"},
		{"snowflake with tag", next(idgenv1.Mode_MODE_SNOWFLAKE, tag, 1), connect.CodeInvalidArgument, "tag"},
		{"segment unknown tag", next(idgenv1.Mode_MODE_SEGMENT, "no-such-tag", 1), connect.CodeNotFound, "tag"},
		{"decode empty", decode(""), connect.CodeInvalidArgument, "id"},
		{"decode text", decode("abc"), connect.CodeInvalidArgument, "id"},
		{"decode uuid", decode(uuid.NewString()), connect.CodeInvalidArgument, "id"},
		{"decode negative", decode("-5"), connect.CodeInvalidArgument, "id"},
		{"decode over 63 bits", decode("18446744073709551615"), connect.CodeInvalidArgument, "id"},
		{"decode segment-sized", decode("1234"), connect.CodeInvalidArgument, "id"},
		{"decode future", decode(future), connect.CodeInvalidArgument, "id"},
		{"create empty tag", create(&idgenv1.CreateTagRequest{}), connect.CodeInvalidArgument, "tag"},
		{"create negative start", create(&idgenv1.CreateTagRequest{Tag: "x", Start: -1}), connect.CodeInvalidArgument, "start"},
		{"create huge start", create(&idgenv1.CreateTagRequest{Tag: "x", Start: 1<<62 + 1}), connect.CodeInvalidArgument, "start"},
		{"create negative step", create(&idgenv1.CreateTagRequest{Tag: "x", Step: -1}), connect.CodeInvalidArgument, "step"},
		{"create huge step", create(&idgenv1.CreateTagRequest{Tag: "x", Step: 1_000_001}), connect.CodeInvalidArgument, "step"},
		{"create long description", create(&idgenv1.CreateTagRequest{Tag: "x", Description: strings.Repeat("d", 257)}), connect.CodeInvalidArgument, "description"},
		{"create existing", create(&idgenv1.CreateTagRequest{Tag: tag}), connect.CodeAlreadyExists, "tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.call(), tt.code, tt.field)
		})
	}

	// Nothing was allocated: the only tag is the one created, untouched.
	res, err := c.ListTags(ctx, &idgenv1.ListTagsRequest{})
	noErr(t, err)
	if len(res.GetTags()) != 1 || res.GetTags()[0].GetMaxId() != 100 || res.GetTags()[0].GetCurrent() != nil {
		t.Fatalf("tags after bad requests = %v, want only %q with max_id 100 and no buffer", res.GetTags(), tag)
	}
}

// TestModes pins what each mode hands out on a fresh instance and fresh tags: canonical UUIDs
// of the right version and variant (v7 carrying the call's time), snowflakes laid out as
// documented with this instance's worker id and the call's time, a segment tag starting at
// its start and Redis INCR at 1, each batch one unbroken run.
func TestModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const worker = 0b1010110101 // a fixed worker id whose bits show any shift or mask
	cfg := withRedis(t, stores[0].open(t))
	cfg.cfg.WorkerID = new(int)
	*cfg.cfg.WorkerID = worker
	inst := startInstance(t, cfg)
	c := inst.client
	tag := testenv.Prefix(t)
	_, err := c.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag, Start: 1000, Step: 100, Description: "orders"})
	noErr(t, err)

	tests := []struct {
		mode  idgenv1.Mode
		tag   string
		check func(t *testing.T, ids []string, call window)
		again func(t *testing.T, ids []string, call window) // the second batch, as ranges
	}{
		{idgenv1.Mode_MODE_UUID_V4, "", checkUUIDs(4), checkUUIDs(4)},
		{idgenv1.Mode_MODE_UUID_V7, "", checkUUIDs(7), checkUUIDs(7)},
		{idgenv1.Mode_MODE_SNOWFLAKE, "", checkSnowflakes(c, worker), checkSnowflakes(c, worker)},
		{idgenv1.Mode_MODE_SEGMENT, tag, checkRun(1000), checkRun(1250)}, // the tag's start
		{idgenv1.Mode_MODE_REDIS_INCR, tag, checkRun(1), checkRun(251)},  // a tag's first use
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			t.Parallel()
			call := window{from: time.Now()}
			res, err := c.Next(ctx, &idgenv1.NextRequest{Mode: tt.mode, Tag: tt.tag, Count: 250})
			call.to = time.Now()
			noErr(t, err)
			if len(res.GetIds()) != 250 || len(res.GetRanges()) != 0 {
				t.Fatalf("got %d IDs and %d ranges, want 250 IDs", len(res.GetIds()), len(res.GetRanges()))
			}
			tt.check(t, res.GetIds(), call)

			// The same as ranges: numeric modes answer with runs of consecutive IDs, which
			// pass the same checks once written out; the UUID modes ignore the request. A
			// new millisecond first: the snowflake check wants its first ID at sequence 0.
			time.Sleep(2 * time.Millisecond)
			call = window{from: time.Now()}
			res, err = c.Next(ctx, &idgenv1.NextRequest{Mode: tt.mode, Tag: tt.tag, Count: 250, Ranges: true})
			call.to = time.Now()
			noErr(t, err)
			ids := res.GetIds()
			if tt.mode != idgenv1.Mode_MODE_UUID_V4 && tt.mode != idgenv1.Mode_MODE_UUID_V7 {
				if len(ids) != 0 || len(res.GetRanges()) == 0 {
					t.Fatalf("asked for ranges, got %d IDs and %d ranges", len(ids), len(res.GetRanges()))
				}
				for _, r := range res.GetRanges() {
					if r.GetEnd() <= r.GetStart() {
						t.Fatalf("empty range %v in %v", r, res.GetRanges())
					}
					for id := r.GetStart(); id < r.GetEnd(); id++ {
						ids = append(ids, strconv.FormatInt(id, 10))
					}
				}
			}
			if len(ids) != 250 {
				t.Fatalf("got %d IDs (%d ranges) asking for ranges, want 250", len(ids), len(res.GetRanges()))
			}
			tt.again(t, ids, call)
		})
	}
}

// window is the span of one call, as the test's clock saw it.
type window struct{ from, to time.Time }

// holds reports whether a time carried to the millisecond may have been taken during the call.
func (w window) holds(at time.Time) bool {
	return !at.Before(w.from.Truncate(time.Millisecond)) && !at.After(w.to)
}

// checkUUIDs checks that every ID is a distinct UUID of version v and the RFC 9562 variant in
// canonical form; a v7's 48-bit Unix millisecond is taken during the call, never decreasing.
func checkUUIDs(v uuid.Version) func(t *testing.T, ids []string, call window) {
	return func(t *testing.T, ids []string, call window) {
		t.Helper()
		seen := map[string]bool{}
		var prev time.Time
		for _, s := range ids {
			u, err := uuid.Parse(s)
			if err != nil || u.String() != s || u.Version() != v || u.Variant() != uuid.RFC4122 || seen[s] {
				t.Fatalf("ID %q is not a fresh canonical UUID v%d of the RFC 9562 variant (version %d, variant %v, err %v)",
					s, v, u.Version(), u.Variant(), err)
			}
			seen[s] = true
			if v != 7 {
				continue
			}
			// The service keeps v7s of one process increasing with a sub-millisecond counter
			// (RFC 9562 6.2, method 3, as google/uuid does) that runs ahead of the clock only
			// past 4096 UUIDs per millisecond, hence a little slack after the call.
			at := time.UnixMilli(int64(binary.BigEndian.Uint64(u[:8]) >> 16))
			if !(window{call.from, call.to.Add(10 * time.Millisecond)}).holds(at) || at.Before(prev) {
				t.Fatalf("UUID v7 %s carries %v (after %v); want a time during the call, %v to %v, never decreasing",
					s, at, prev, call.from, call.to)
			}
			prev = at
		}
	}
}

// snowflakeID is a snowflake taken apart by the layout docs/api.md documents: a zero sign
// bit, 41 bits of milliseconds since 2026-01-01T00:00:00Z, 10 bits of worker id, 12 bits of
// sequence. It is worked out here, not with package snowflake, so that a layout bug shared by
// encoding and decoding still shows.
type snowflakeID struct {
	at          time.Time
	worker, seq int64
}

var snowflakeEpoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

func layout(t *testing.T, s string) snowflakeID {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("snowflake %q is not a positive decimal 63-bit integer (err %v)", s, err)
	}
	return snowflakeID{at: snowflakeEpoch.Add(time.Duration(n>>22) * time.Millisecond), worker: n >> 12 & 1023, seq: n & 4095}
}

// checkSnowflakes checks that every ID carries worker and a millisecond of the call, that the
// batch is whole runs of milliseconds (within one the sequence counts up by one; a
// millisecond's first ID, the instance's very first included, has sequence 0), and that the
// service's Decode reads the IDs as the layout says.
func checkSnowflakes(c idgenv1connect.IdServiceClient, worker int64) func(t *testing.T, ids []string, call window) {
	return func(t *testing.T, ids []string, call window) {
		t.Helper()
		var prev snowflakeID // nothing issued before: the first ID starts a millisecond
		for _, s := range ids {
			id := layout(t, s)
			if id.worker != worker || !call.holds(id.at) {
				t.Fatalf("snowflake %s is worker %d at %v; want worker %d at a time during the call, %v to %v",
					s, id.worker, id.at, worker, call.from, call.to)
			}
			if id.at.Equal(prev.at) && id.seq != prev.seq+1 || id.at.After(prev.at) && id.seq != 0 || id.at.Before(prev.at) {
				t.Fatalf("snowflake %s (%v, sequence %d) after %v, sequence %d: want the next sequence of the millisecond or sequence 0 of a later one",
					s, id.at, id.seq, prev.at, prev.seq)
			}
			prev = id
		}
		for _, s := range []string{ids[0], ids[len(ids)-1]} {
			want := layout(t, s)
			d, err := c.Decode(context.Background(), &idgenv1.DecodeRequest{Id: s})
			noErr(t, err)
			if got := d.GetTime().AsTime(); !got.Equal(want.at) || int64(d.GetWorkerId()) != want.worker || int64(d.GetSequence()) != want.seq {
				t.Fatalf("Decode(%s) = %v, worker %d, sequence %d; the documented layout says %v, worker %d, sequence %d",
					s, got, d.GetWorkerId(), d.GetSequence(), want.at, want.worker, want.seq)
			}
		}
	}
}

// checkRun checks that the IDs are the decimals from, from+1, ... with no gap: a fresh tag's
// first batch is one reservation starting at the tag's first ID.
func checkRun(from int64) func(t *testing.T, ids []string, call window) {
	return func(t *testing.T, ids []string, _ window) {
		t.Helper()
		for i, s := range ids {
			if want := strconv.FormatInt(from+int64(i), 10); s != want {
				t.Fatalf("ID %d is %q; want %s: the run %d, %d, ... from the sequence's start", i, s, want, from, from+1)
			}
		}
	}
}
