package taskpick_test

import (
	"crypto/rand"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// testRivalCannotFinish plays a rival who reads a leased task with Get, works out its public
// lease token from run_at (token = (run_at_ms − 1 − ttl_ms) × 1024, as the engines compute
// it), and tries to Ack, Nack and Extend it: with no secret, a guessed one, and the secret of
// a lease of its own. Every try fails and changes nothing; the worker's Ack still works.
func testRivalCannotFinish(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "rival")
	put(t, in, p, task("victim"), task("bait"))
	const ttl = 30 * time.Second
	time.Sleep(5 * time.Millisecond) // picked in a later millisecond than put: the token is now_ms × 1024
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p, Ttl: sec(ttl)})[0]
	own := pick(t, in, &taskpickv1.PickRequest{Pool: p, Ttl: sec(ttl)})[0] // the rival's own lease
	if lt.GetId() != "victim" || own.GetId() != "bait" || lt.GetLeaseSecret() == "" || lt.GetLeaseSecret() == own.GetLeaseSecret() {
		t.Fatalf("picked %v then %v; want victim then bait, each with a secret of its own", lt, own)
	}
	seen := get(t, in, p, "victim")
	token := uint64(seen.GetRunAt().AsTime().UnixMilli()-1-ttl.Milliseconds()) * 1024
	if token != lt.GetLeaseToken() {
		t.Fatalf("token from Get's run_at %d, the lease's %d: the public token is no longer derivable (update this test)", token, lt.GetLeaseToken())
	}
	// Nothing anyone may read shows the secret.
	dump := protojson.Format(seen) + protojson.Format(stats(t, in, p))
	if strings.Contains(dump, lt.GetLeaseSecret()) || strings.Contains(strings.ToLower(dump), "secret") {
		t.Fatalf("Get or Stats shows the lease secret: %s", dump)
	}
	for _, try := range []struct {
		name, secret string
		code         connect.Code
	}{
		{"no secret", "", connect.CodeInvalidArgument},
		{"a guessed secret", rand.Text(), connect.CodeFailedPrecondition},
		{"the secret of another lease", own.GetLeaseSecret(), connect.CodeFailedPrecondition},
		{"the secret one character off", offByOne(lt.GetLeaseSecret()), connect.CodeFailedPrecondition},
	} {
		_, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "victim", LeaseToken: token, LeaseSecret: try.secret})
		if connect.CodeOf(err) != try.code {
			t.Fatalf("rival's Ack with %s: %v, want %v", try.name, err, try.code)
		}
		_, err = in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "victim", LeaseToken: token, LeaseSecret: try.secret})
		if connect.CodeOf(err) != try.code {
			t.Fatalf("rival's Nack with %s: %v, want %v", try.name, err, try.code)
		}
		_, err = in.client.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "victim", LeaseToken: token, LeaseSecret: try.secret, Ttl: sec(time.Hour)})
		if connect.CodeOf(err) != try.code {
			t.Fatalf("rival's Extend with %s: %v, want %v", try.name, err, try.code)
		}
		if _, err := in.client.Batch(ctx, &taskpickv1.BatchRequest{Operations: []*taskpickv1.BatchOperation{
			ackOp(&taskpickv1.AckRequest{Pool: p, Id: "victim", LeaseToken: token, LeaseSecret: try.secret}),
		}}); err != nil {
			t.Fatalf("Batch: %v", err)
		}
	}
	if g := get(t, in, p, "victim"); g.GetState() != taskpickv1.State_STATE_LEASED || g.GetFailures() != 0 || !g.GetRunAt().AsTime().Equal(seen.GetRunAt().AsTime()) {
		t.Fatalf("the rival changed the task: %v, was %v", g, seen)
	}
	if _, err := in.client.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "victim", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()}); err != nil {
		t.Fatalf("the worker's Extend after the rival's tries: %v", err)
	}
	if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "victim", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()}); err != nil {
		t.Fatalf("the worker's Ack after the rival's tries: %v", err)
	}
	// A lease's secret dies with it: the next lease of the same task has a new one.
	put(t, in, p, task("again"))
	first := pick(t, in, &taskpickv1.PickRequest{Pool: p})[0]
	if _, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "again", LeaseToken: first.GetLeaseToken(), LeaseSecret: first.GetLeaseSecret()}); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	second := pick(t, in, &taskpickv1.PickRequest{Pool: p})[0]
	_, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "again", LeaseToken: second.GetLeaseToken(), LeaseSecret: first.GetLeaseSecret()})
	wantCode(t, err, connect.CodeFailedPrecondition)
}

// testHugeTokens presents tokens of 2^63 and more, which SQLite's signed integers cannot
// hold: every backend answers as for any other wrong token (failed_precondition for a leased
// task, not_found for a missing one), never unavailable.
func testHugeTokens(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "huge")
	put(t, in, p, task("x"))
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p})[0]
	for _, tok := range []uint64{1 << 63, 1<<63 + 1, math.MaxUint64} {
		for id, code := range map[string]connect.Code{"x": connect.CodeFailedPrecondition, "missing": connect.CodeNotFound} {
			_, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: id, LeaseToken: tok, LeaseSecret: lt.GetLeaseSecret()})
			wantCode(t, err, code)
			_, err = in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: id, LeaseToken: tok, LeaseSecret: lt.GetLeaseSecret()})
			wantCode(t, err, code)
			_, err = in.client.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: id, LeaseToken: tok, LeaseSecret: lt.GetLeaseSecret()})
			wantCode(t, err, code)
		}
	}
	if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "x", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()}); err != nil {
		t.Fatalf("Ack after the huge tokens: %v", err)
	}
}

// testPickOrder picks several tasks at once and wants them answered in pick order: by
// priority, FIFO among equals (ORDER_PRIORITY), and by availability (ORDER_FIFO).
func testPickOrder(t *testing.T, b backendCase) {
	in, pp, pf := one(t, b), pool(t, "prio-batch"), pool(t, "fifo-batch")
	var prio, fifo []*taskpickv1.NewTask
	for i, pr := range []int32{1, 5, 3, 5, 9, 2, 9, 0} {
		prio = append(prio, &taskpickv1.NewTask{Id: "p" + string(rune('0'+i)), Priority: pr})
		fifo = append(fifo, &taskpickv1.NewTask{Id: "f" + string(rune('0'+i)), Priority: pr}) // priority must not matter
	}
	put(t, in, pp, prio...) // one Put: one availability time, FIFO by the order put
	put(t, in, pf, fifo...)
	for _, want := range [][]string{{"p4", "p6", "p1", "p3"}, {"p2", "p5", "p0", "p7"}} {
		if got := ids(pick(t, in, &taskpickv1.PickRequest{Pool: pp, Count: 4, Order: taskpickv1.Order_ORDER_PRIORITY})); !slices.Equal(got, want) {
			t.Fatalf("ORDER_PRIORITY count 4 answered %v, want %v", got, want)
		}
	}
	if got := ids(pick(t, in, &taskpickv1.PickRequest{Pool: pf, Count: 8, Order: taskpickv1.Order_ORDER_FIFO})); !slices.Equal(got, []string{"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"}) {
		t.Fatalf("ORDER_FIFO count 8 answered %v, want f0 to f7", got)
	}
}

// offByOne is s with its last character changed.
func offByOne(s string) string {
	last := s[len(s)-1]
	if last == 'A' {
		return s[:len(s)-1] + "B"
	}
	return s[:len(s)-1] + "A"
}
