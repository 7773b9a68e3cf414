package idgen

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// FuzzParseNext checks that request validation never panics, rejects with invalid_argument
// naming a field, and only lets through what the engines can take.
func FuzzParseNext(f *testing.F) {
	f.Add(int32(3), "", uint32(5))
	f.Add(int32(4), "orders", uint32(10000))
	f.Add(int32(5), "", uint32(1))
	f.Add(int32(0), "x", uint32(0))
	f.Add(int32(4), strings.Repeat("t", 129), uint32(10001))
	f.Add(int32(5), "a\xffb", uint32(3))
	f.Add(int32(1), "tag", uint32(1))
	f.Add(int32(-7), "订单:42 with space", uint32(42))
	f.Fuzz(func(t *testing.T, mode int32, tag string, count uint32) {
		p, err := parseNext(&idgenv1.NextRequest{Mode: idgenv1.Mode(mode), Tag: tag, Count: count})
		if err != nil {
			testenv.WantInvalidField(t, err, "mode", "tag", "count")
			return
		}
		if p.count < 1 || p.count > MaxCount {
			t.Fatalf("accepted count %d", p.count)
		}
		switch p.mode {
		case idgenv1.Mode_MODE_SEGMENT, idgenv1.Mode_MODE_REDIS_INCR:
			if p.tag == "" || len(p.tag) > MaxTagBytes || !utf8.ValidString(p.tag) || strings.IndexFunc(p.tag, unicode.IsControl) >= 0 {
				t.Fatalf("accepted bad tag %q", p.tag)
			}
		case idgenv1.Mode_MODE_UUID_V4, idgenv1.Mode_MODE_UUID_V7, idgenv1.Mode_MODE_SNOWFLAKE:
			if p.tag != "" {
				t.Fatalf("accepted tag %q for %s", p.tag, p.mode)
			}
		default:
			t.Fatalf("accepted mode %d", mode)
		}
	})
}

// FuzzParseCreateTag checks CreateTag validation the same way.
func FuzzParseCreateTag(f *testing.F) {
	f.Add("orders", int64(0), int64(0), "")
	f.Add("", int64(-1), int64(1_000_001), strings.Repeat("d", 257))
	f.Add("t", int64(1<<62), int64(1), "\xff")
	f.Add("t\x00", int64(1<<62+1), int64(-5), "ok")
	f.Fuzz(func(t *testing.T, tag string, start, step int64, description string) {
		p, err := parseCreateTag(&idgenv1.CreateTagRequest{Tag: tag, Start: start, Step: step, Description: description})
		if err != nil {
			testenv.WantInvalidField(t, err, "tag", "start", "step", "description")
			return
		}
		// start 0 is unset: the engine starts at 1, or where a deleted tag of the name stopped.
		if p.start < 0 || p.start > 1<<62 || p.step < 1 || p.step > MaxStep || len(p.description) > MaxDescriptionBytes {
			t.Fatalf("accepted %+v", p)
		}
	})
}

// FuzzParseDecode checks that Decode accepts only non-negative decimal int64s and that its
// errors name id and stay short, whatever the input.
func FuzzParseDecode(f *testing.F) {
	f.Add("123")
	f.Add("-1")
	f.Add(strings.Repeat("9", 100))
	f.Add("1\xff")
	f.Fuzz(func(t *testing.T, id string) {
		got, err := parseDecode(&idgenv1.DecodeRequest{Id: id})
		if err != nil {
			testenv.WantInvalidField(t, err, "id")
			if len(err.Error()) > testenv.MaxErrorMessageBytes {
				t.Fatalf("error is %d bytes: %v", len(err.Error()), err)
			}
			return
		}
		if n, perr := strconv.ParseInt(id, 10, 64); got < 0 || len(id) > 19 || perr != nil || n != got {
			t.Fatalf("accepted %q as %d", id, got)
		}
	})
}
