package lock

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// TestEventJSONSameShape: what non-Go subscribers parse (field names, a string token, the
// kind by name) must be protojson's, not just read back the same by protojson.
func TestEventJSONSameShape(t *testing.T) {
	ev := &lockv1.LockEvent{Key: "k\x01é", Backend: "redis", Kind: lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED, FencingToken: math.MaxUint64, HolderId: "h", ExpiresAt: timestamppb.Now(), Time: &timestamppb.Timestamp{Seconds: 1_800_000_000, Nanos: 120_000_000}}
	want, err := protojson.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	if err := json.Unmarshal(appendEventJSON(nil, ev), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("ours %v, protojson %v", a, b)
	}
}
