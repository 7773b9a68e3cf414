package lock

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// TestEventJSONReadsBackAsProtojson checks the hand-written encoder against protojson: every
// event reads back, with protojson, as exactly the event encoded, and is valid JSON.
func TestEventJSONReadsBackAsProtojson(t *testing.T) {
	at := func(sec int64, nanos int32) *timestamppb.Timestamp {
		return &timestamppb.Timestamp{Seconds: sec, Nanos: nanos}
	}
	events := map[string]*lockv1.LockEvent{
		"empty":    {},
		"acquired": {Key: "order:42", Backend: "redis", Kind: lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED, FencingToken: 7, HolderId: "h1", ExpiresAt: timestamppb.Now(), Time: timestamppb.Now()},
		"released": {Key: "k", Backend: "sqlite", Kind: lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED, FencingToken: math.MaxUint64},
		"expired":  {Key: "k", Backend: "mysql", Kind: lockv1.LockEventKind_LOCK_EVENT_KIND_EXPIRED, Time: at(0, 0)},
		"escapes":  {Key: "a\"b\\c\n\r\t\b\f\x00\x01\x1f\x7f/<>&\u2028\u2029é漢字🔒", Backend: "redis"},
		"millis":   {Key: "k", Time: at(1_800_000_000, 123_000_000)},
		"micros":   {Key: "k", Time: at(1_800_000_000, 123_456_000)},
		"nanos":    {Key: "k", Time: at(1_800_000_000, 123_456_789)},
		"one nano": {Key: "k", Time: at(1_800_000_000, 1)},
		"far":      {Key: "k", ExpiresAt: at(253402300799, 999_999_999)},
		"epoch-":   {Key: "k", ExpiresAt: at(-62135596800, 0)},
		"unknown":  {Key: "k", Kind: lockv1.LockEventKind(99)},
		"long key": {Key: string(make([]byte, 512)), Time: timestamppb.New(time.Date(2026, 11, 24, 1, 2, 3, 4, time.UTC))},
	}
	for name, ev := range events {
		t.Run(name, func(t *testing.T) {
			data := appendEventJSON(nil, ev)
			var got lockv1.LockEvent
			if err := protojson.Unmarshal(data, &got); err != nil {
				t.Fatalf("protojson cannot read %s: %v", data, err)
			}
			if !proto.Equal(&got, ev) {
				t.Fatalf("read back %v, encoded %v (json %s)", &got, ev, data)
			}
			want, err := protojson.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			var fromProtojson lockv1.LockEvent
			if err := protojson.Unmarshal(want, &fromProtojson); err != nil || !proto.Equal(&fromProtojson, &got) {
				t.Fatalf("protojson's own form %s reads as %v, ours as %v", want, &fromProtojson, &got)
			}
		})
	}
}

// TestEventJSONInvalidUTF8 checks that a string that is not valid UTF-8 (which the service
// never lets through) still encodes as valid JSON.
func TestEventJSONInvalidUTF8(t *testing.T) {
	data := appendEventJSON(nil, &lockv1.LockEvent{Key: "a\xffb\xc3"})
	var got lockv1.LockEvent
	if err := protojson.Unmarshal(data, &got); err != nil {
		t.Fatalf("protojson cannot read %q: %v", data, err)
	}
	if got.GetKey() != "a\uFFFDb\uFFFD" {
		t.Fatalf("key %q", got.GetKey())
	}
}

func BenchmarkEventJSON(b *testing.B) {
	ev := &lockv1.LockEvent{Key: "order:42", Backend: "redis", Kind: lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED, FencingToken: 7, HolderId: "Zm9vYmFyYmF6cXV4", ExpiresAt: timestamppb.Now(), Time: timestamppb.Now()}
	b.Run("ours", func(b *testing.B) {
		for b.Loop() {
			appendEventJSON(make([]byte, 0, 256), ev)
		}
	})
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			_, _ = protojson.Marshal(ev)
		}
	})
}
