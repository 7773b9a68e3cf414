package idgen_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	"github.com/coordkit/coordkit/libs/testenv"
	idgenv1 "github.com/coordkit/coordkit/proto/gen/coordkit/idgen/v1"
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

func TestModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inst := startInstance(t, withRedis(t, stores[0].open(t)))
	c := inst.client
	tag := testenv.Prefix(t)
	_, err := c.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag, Start: 1000, Step: 100, Description: "orders"})
	noErr(t, err)

	tests := []struct {
		mode  idgenv1.Mode
		tag   string
		check func(t *testing.T, ids []string)
	}{
		{idgenv1.Mode_MODE_UUID_V4, "", checkUUIDs(4)},
		{idgenv1.Mode_MODE_UUID_V7, "", checkUUIDs(7)},
		{idgenv1.Mode_MODE_SNOWFLAKE, "", checkIncreasing(0)},
		{idgenv1.Mode_MODE_SEGMENT, tag, checkIncreasing(1000)},
		{idgenv1.Mode_MODE_REDIS_INCR, tag, checkIncreasing(1)},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			t.Parallel()
			res, err := c.Next(ctx, &idgenv1.NextRequest{Mode: tt.mode, Tag: tt.tag, Count: 250})
			noErr(t, err)
			if len(res.GetIds()) != 250 {
				t.Fatalf("got %d IDs, want 250", len(res.GetIds()))
			}
			tt.check(t, res.GetIds())
		})
	}

	t.Run("DecodeRoundTrip", func(t *testing.T) {
		t.Parallel()
		before := time.Now().Truncate(time.Millisecond)
		res, err := c.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_SNOWFLAKE, Count: 1})
		noErr(t, err)
		d, err := c.Decode(ctx, &idgenv1.DecodeRequest{Id: res.GetIds()[0]})
		noErr(t, err)
		if at := d.GetTime().AsTime(); at.Before(before) || at.After(time.Now()) {
			t.Fatalf("decoded time %v is not within the call (from %v)", at, before)
		}
		if d.GetWorkerId() > snowflake.MaxWorker || d.GetSequence() > snowflake.MaxSequence {
			t.Fatalf("decoded %v out of range", d)
		}
	})
}

// checkUUIDs checks that every ID is a distinct UUID of version v.
func checkUUIDs(v uuid.Version) func(t *testing.T, ids []string) {
	return func(t *testing.T, ids []string) {
		t.Helper()
		seen := map[string]bool{}
		for _, s := range ids {
			u, err := uuid.Parse(s)
			if err != nil || u.Version() != v || seen[s] {
				t.Fatalf("ID %q is not a fresh UUID v%d (err %v)", s, v, err)
			}
			seen[s] = true
		}
	}
}

// checkIncreasing checks that the IDs are decimal, at least from, and strictly increasing.
func checkIncreasing(from int64) func(t *testing.T, ids []string) {
	return func(t *testing.T, ids []string) {
		t.Helper()
		prev := from - 1
		for _, s := range ids {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= prev {
				t.Fatalf("ID %q after %d: want a strictly increasing decimal from %d (err %v)", s, prev, from, err)
			}
			prev = n
		}
	}
}
