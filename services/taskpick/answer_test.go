package taskpick_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/services/taskpick"
)

// answerSize is a message's size in the larger of its two encodings.
func answerSize(t *testing.T, m proto.Message) int {
	t.Helper()
	js, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return max(len(js), proto.Size(m))
}

// testAnswerLimit asks a service with a 1 MiB answer limit for 8 tasks of 200 KiB: Pick
// leases only the 3 that fit (the others stay available, never leased unseen), and ListDead
// of 8 such dead tasks lists 3 and says truncated. Every answer stays within the limit in
// both encodings.
func testAnswerLimit(t *testing.T, b backendCase) {
	const limit = 1 << 20
	in := startInstance(t, b.name, b.store(t)(t), embeddedBus(t), func(c *taskpick.Config) { c.MaxAnswerBytes = limit })
	p := pool(t, "bounded")
	payload := bytes.Repeat([]byte{0xfb}, 200<<10)
	for i := 0; i < 8; i += 4 {
		var ts []*taskpickv1.NewTask
		for j := i; j < i+4; j++ {
			ts = append(ts, &taskpickv1.NewTask{Id: fmt.Sprint("big", j), Payload: payload, MaxAttempts: 1})
		}
		put(t, in, p, ts...)
	}
	var all []*taskpickv1.LeasedTask
	for _, want := range []int{3, 3, 2} {
		resp, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Count: 8})
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		if n := answerSize(t, resp); len(resp.GetTasks()) != want || n > limit {
			t.Fatalf("Pick of 8 answered %d tasks in %d bytes; want %d within %d", len(resp.GetTasks()), n, want, limit)
		}
		if s := stats(t, in, p); s.GetLeased() != uint64(len(all)+want) || s.GetAvailable() != uint64(8-len(all)-want) {
			t.Fatalf("after a Pick of %d: %v; a task was leased but not answered", want, s)
		}
		all = append(all, resp.GetTasks()...)
	}
	if got := ids(all); !slices.Equal(got, []string{"big0", "big1", "big2", "big3", "big4", "big5", "big6", "big7"}) {
		t.Fatalf("picked %v, want big0 to big7 in order", got)
	}
	for _, lt := range all {
		if _, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: lt.GetId(), LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret(), Reason: "too big"}); err != nil {
			t.Fatalf("Nack: %v", err)
		}
	}
	dead, err := in.client.ListDead(ctx, &taskpickv1.ListDeadRequest{Pool: p, Limit: 1000})
	if err != nil {
		t.Fatalf("ListDead: %v", err)
	}
	if n := answerSize(t, dead); len(dead.GetTasks()) != 3 || !dead.GetTruncated() || dead.GetTotal() != 8 || n > limit {
		t.Fatalf("ListDead answered %d of %d tasks (truncated %v) in %d bytes; want 3 of 8, truncated, within %d",
			len(dead.GetTasks()), dead.GetTotal(), dead.GetTruncated(), n, limit)
	}
	small, err := in.client.ListDead(ctx, &taskpickv1.ListDeadRequest{Pool: p, Limit: 2})
	if err != nil || len(small.GetTasks()) != 2 || small.GetTruncated() {
		t.Fatalf("ListDead limit 2: %v, %v; want 2 tasks, not truncated", small, err)
	}
}
