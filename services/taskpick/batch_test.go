package taskpick_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/server"
)

func putOp(req *taskpickv1.PutRequest) *taskpickv1.BatchOperation {
	return &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Put{Put: req}}
}

func ackOp(req *taskpickv1.AckRequest) *taskpickv1.BatchOperation {
	return &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Ack{Ack: req}}
}

func nackOp(req *taskpickv1.NackRequest) *taskpickv1.BatchOperation {
	return &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Nack{Nack: req}}
}

func extendOp(req *taskpickv1.ExtendRequest) *taskpickv1.BatchOperation {
	return &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Extend{Extend: req}}
}

func getOp(req *taskpickv1.GetRequest) *taskpickv1.BatchOperation {
	return &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Get{Get: req}}
}

// batchCode is a batch result's Connect code, 0 on success; it fails the test when the
// result is malformed (both or neither of a response and an error, an unknown code).
func batchCode(t *testing.T, name string, r *taskpickv1.BatchResult) connect.Code {
	t.Helper()
	e := r.GetError()
	if e == nil {
		if r.GetResult() == nil {
			t.Errorf("%s: neither a result nor an error", name)
		}
		return 0
	}
	if r.GetResult() != nil {
		t.Errorf("%s: both a result and an error", name)
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(e.GetCode())); err != nil {
		t.Errorf("%s: error code %q: %v", name, e.GetCode(), err)
	}
	return code
}

// TestBatchMixedOperations sends, on every backend, one batch of valid and invalid
// operations and checks that every operation got its own result, in order, with exactly the
// code and message the same operation gets as its own unary call; the valid ones are
// applied, the invalid ones change nothing.
func TestBatchMixedOperations(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			in, p := one(t, b), pool(t, "mixed")
			raw := in.client
			put(t, in, p, task("ack-me"), task("nack-me"), task("extend-me"), task("stale"))
			tokens, secrets := map[string]uint64{}, map[string]string{}
			for _, lt := range pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 4, Ttl: sec(time.Minute)}) {
				tokens[lt.GetId()], secrets[lt.GetId()] = lt.GetLeaseToken(), lt.GetLeaseSecret()
			}
			if len(tokens) != 4 {
				t.Fatalf("picked %v, want the 4 tasks", tokens)
			}
			put(t, in, p, task("seen"))

			tests := []struct {
				name string
				op   *taskpickv1.BatchOperation
				want connect.Code // 0: success
				// unary sends the operation as its own call, for the answer to compare with;
				// nil when sending it again would change the outcome (a successful Ack).
				unary func() (proto.Message, error)
			}{
				{"put new", putOp(&taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{task("new")}}), 0, nil},
				{"put existing", putOp(&taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{task("seen")}}), 0,
					func() (proto.Message, error) {
						return raw.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{task("seen")}})
					}},
				{"put without pool", putOp(&taskpickv1.PutRequest{Tasks: []*taskpickv1.NewTask{task("x")}}), connect.CodeInvalidArgument,
					func() (proto.Message, error) {
						return raw.Put(ctx, &taskpickv1.PutRequest{Tasks: []*taskpickv1.NewTask{task("x")}})
					}},
				{"put duplicate ids", putOp(&taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{task("dup"), task("dup")}}), connect.CodeInvalidArgument,
					func() (proto.Message, error) {
						return raw.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{task("dup"), task("dup")}})
					}},
				{"ack", ackOp(&taskpickv1.AckRequest{Pool: p, Id: "ack-me", LeaseToken: tokens["ack-me"], LeaseSecret: secrets["ack-me"]}), 0, nil},
				{"ack stale token", ackOp(&taskpickv1.AckRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"] + 1, LeaseSecret: secrets["stale"]}), connect.CodeFailedPrecondition,
					func() (proto.Message, error) {
						return raw.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"] + 1, LeaseSecret: secrets["stale"]})
					}},
				{"ack missing task", ackOp(&taskpickv1.AckRequest{Pool: p, Id: "missing", LeaseToken: 1, LeaseSecret: "s"}), connect.CodeNotFound,
					func() (proto.Message, error) {
						return raw.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "missing", LeaseToken: 1, LeaseSecret: "s"})
					}},
				{"ack token 0", ackOp(&taskpickv1.AckRequest{Pool: p, Id: "stale"}), connect.CodeInvalidArgument,
					func() (proto.Message, error) { return raw.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "stale"}) }},
				{"ack unknown backend", ackOp(&taskpickv1.AckRequest{Backend: "nope", Pool: p, Id: "stale", LeaseToken: tokens["stale"], LeaseSecret: secrets["stale"]}), connect.CodeInvalidArgument,
					func() (proto.Message, error) {
						return raw.Ack(ctx, &taskpickv1.AckRequest{Backend: "nope", Pool: p, Id: "stale", LeaseToken: tokens["stale"], LeaseSecret: secrets["stale"]})
					}},
				{"nack", nackOp(&taskpickv1.NackRequest{Pool: p, Id: "nack-me", LeaseToken: tokens["nack-me"], LeaseSecret: secrets["nack-me"], Reason: "batched"}), 0, nil},
				{"nack retry_after too long", nackOp(&taskpickv1.NackRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"], LeaseSecret: secrets["stale"], RetryAfter: sec(31 * 24 * time.Hour)}), connect.CodeInvalidArgument,
					func() (proto.Message, error) {
						return raw.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"], LeaseSecret: secrets["stale"], RetryAfter: sec(31 * 24 * time.Hour)})
					}},
				{"nack stale token", nackOp(&taskpickv1.NackRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"] + 2, LeaseSecret: secrets["stale"]}), connect.CodeFailedPrecondition,
					func() (proto.Message, error) {
						return raw.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"] + 2, LeaseSecret: secrets["stale"]})
					}},
				{"extend", extendOp(&taskpickv1.ExtendRequest{Pool: p, Id: "extend-me", LeaseToken: tokens["extend-me"], LeaseSecret: secrets["extend-me"], Ttl: sec(time.Hour)}), 0, nil},
				{"extend tiny ttl", extendOp(&taskpickv1.ExtendRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"], LeaseSecret: secrets["stale"], Ttl: sec(time.Millisecond)}), connect.CodeInvalidArgument,
					func() (proto.Message, error) {
						return raw.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"], LeaseSecret: secrets["stale"], Ttl: sec(time.Millisecond)})
					}},
				{"extend stale token", extendOp(&taskpickv1.ExtendRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"] + 1, LeaseSecret: secrets["stale"]}), connect.CodeFailedPrecondition,
					func() (proto.Message, error) {
						return raw.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"] + 1, LeaseSecret: secrets["stale"]})
					}},
				{"get", getOp(&taskpickv1.GetRequest{Pool: p, Id: "seen"}), 0,
					func() (proto.Message, error) { return raw.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "seen"}) }},
				{"get missing task", getOp(&taskpickv1.GetRequest{Pool: p, Id: "missing"}), connect.CodeNotFound,
					func() (proto.Message, error) { return raw.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "missing"}) }},
				{"get huge id", getOp(&taskpickv1.GetRequest{Pool: p, Id: strings.Repeat("i", 513)}), connect.CodeInvalidArgument,
					func() (proto.Message, error) {
						return raw.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: strings.Repeat("i", 513)})
					}},
				{"no operation", &taskpickv1.BatchOperation{}, connect.CodeInvalidArgument, nil},
			}
			ops := make([]*taskpickv1.BatchOperation, len(tests))
			for i, tt := range tests {
				ops[i] = tt.op
			}
			res, err := raw.Batch(ctx, &taskpickv1.BatchRequest{Operations: ops})
			if err != nil {
				t.Fatalf("Batch: %v", err)
			}
			if len(res.GetResults()) != len(ops) {
				t.Fatalf("%d results for %d operations", len(res.GetResults()), len(ops))
			}
			for i, tt := range tests {
				r := res.GetResults()[i]
				got := batchCode(t, tt.name, r)
				if got != tt.want {
					t.Errorf("%s: code %v (%s), want %v", tt.name, got, r.GetError().GetMessage(), tt.want)
					continue
				}
				if tt.unary == nil {
					continue
				}
				alone, err := tt.unary()
				if connect.CodeOf(err) != tt.want && !(tt.want == 0 && err == nil) {
					t.Errorf("%s: alone it answers %v, batched %v", tt.name, err, got)
				}
				if ce := new(connect.Error); errors.As(err, &ce) && ce.Message() != r.GetError().GetMessage() {
					t.Errorf("%s: batched message %q, alone %q", tt.name, r.GetError().GetMessage(), ce.Message())
				}
				// The batched response is the unary one (Get and an idempotent Put change nothing).
				if resp := batchResponse(r); err == nil && !proto.Equal(resp, alone) {
					t.Errorf("%s: batched response %v, alone %v", tt.name, resp, alone)
				}
			}

			// The valid operations were applied, the invalid ones changed nothing.
			if _, err := raw.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "ack-me"}); connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("the batched ack left the task: %v", err)
			}
			if st := get(t, in, p, "nack-me"); st.GetState() != taskpickv1.State_STATE_AVAILABLE || st.GetLastError() != "batched" {
				t.Errorf("the batched nack left %v, want available with its reason", st)
			}
			if st := get(t, in, p, "extend-me"); st.GetRunAt().AsTime().Before(time.Now().Add(50 * time.Minute)) {
				t.Errorf("the batched extend left the lease ending at %v, want in about an hour", st.GetRunAt().AsTime())
			}
			if got := res.GetResults()[0].GetPut().GetCreated(); len(got) != 1 || !got[0] {
				t.Errorf("put new answered %v, want created", got)
			}
			if _, err := raw.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "dup"}); connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("the refused put wrote its task: %v", err)
			}
			if st := get(t, in, p, "stale"); st.GetState() != taskpickv1.State_STATE_LEASED || st.GetFailures() != 0 {
				t.Errorf("refused operations changed the stale task: %v", st)
			}
			if _, err := raw.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "stale", LeaseToken: tokens["stale"], LeaseSecret: secrets["stale"]}); err != nil {
				t.Errorf("the stale task's real lease after the refused batch operations: %v", err)
			}
		})
	}
}

// batchResponse is the response a successful batch result carries.
func batchResponse(r *taskpickv1.BatchResult) proto.Message {
	switch x := r.GetResult().(type) {
	case *taskpickv1.BatchResult_Put:
		return x.Put
	case *taskpickv1.BatchResult_Ack:
		return x.Ack
	case *taskpickv1.BatchResult_Nack:
		return x.Nack
	case *taskpickv1.BatchResult_Extend:
		return x.Extend
	case *taskpickv1.BatchResult_Get:
		return x.Get
	}
	return nil
}

// TestBatchRequestLimits refuses, as a whole, a batch that is empty or too large, and takes
// a full one.
func TestBatchRequestLimits(t *testing.T) {
	t.Parallel()
	in, p := startInstance(t, "sqlite", sqliteStore(t)(t), nil), pool(t, "limits")
	ops := make([]*taskpickv1.BatchOperation, server.MaxBatchOperations+1)
	for i := range ops {
		ops[i] = getOp(&taskpickv1.GetRequest{Pool: p, Id: "missing"})
	}
	tests := []struct {
		name string
		ops  []*taskpickv1.BatchOperation
		want connect.Code // 0: answered, one result per operation
	}{
		{"empty", nil, connect.CodeInvalidArgument},
		{"one too many", ops, connect.CodeInvalidArgument},
		{"full", ops[:server.MaxBatchOperations], 0},
		{"one", ops[:1], 0},
	}
	for _, tt := range tests {
		res, err := in.client.Batch(ctx, &taskpickv1.BatchRequest{Operations: tt.ops})
		switch {
		case tt.want != 0:
			if connect.CodeOf(err) != tt.want {
				t.Errorf("%s batch: %v, want %v", tt.name, err, tt.want)
			}
		case err != nil:
			t.Errorf("%s batch: %v, want answered", tt.name, err)
		case len(res.GetResults()) != len(tt.ops):
			t.Errorf("%s batch: %d results for %d operations", tt.name, len(res.GetResults()), len(tt.ops))
		default:
			for i, r := range res.GetResults() {
				if r.GetError().GetCode() != connect.CodeNotFound.String() {
					t.Errorf("%s batch: result %d is %v, want not_found", tt.name, i, r)
					break
				}
			}
		}
	}
}
