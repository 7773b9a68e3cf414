package lock_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

// panicky is a backend whose Inspect panics: a stand-in for any bug in an engine or driver.
type panicky struct{ lock.Backend }

func (panicky) Inspect(context.Context, string) (lock.State, error) { panic("engine bug") }

// panickySteps is a BatchBackend whose RunSteps panics after running its first step: a bug in
// the code that runs a whole batch's steps together.
type panickySteps struct{ lock.BatchBackend }

func (b panickySteps) RunSteps(ctx context.Context, steps []*lock.Step) {
	b.BatchBackend.RunSteps(ctx, steps[:1])
	panic("engine bug in a pipeline")
}

// lostHolds is a BatchBackend whose RunSteps reports the acquire of key "lost" as the
// second hold of its fresh owner, which makes the service drop the hold it thinks a lost
// answer took, through Release; and that Release panics. The panic happens while the
// service finishes one operation of the group, after the engine answered them all.
type lostHolds struct{ lock.BatchBackend }

func (b lostHolds) RunSteps(ctx context.Context, steps []*lock.Step) {
	b.BatchBackend.RunSteps(ctx, steps)
	for _, st := range steps {
		if st.Key == "lost" && st.Attempt.Acquired {
			st.Attempt.Lease.HoldCount = 2
		}
	}
}

func (lostHolds) Release(context.Context, string, string, uint64) (uint32, lock.Released, error) {
	panic("engine bug in release")
}

// TestPanicInBatch: the server recovers a panic in a single call (internal error, the
// process lives on: connect.WithRecover in libs/server), and so it must in a batched
// operation, which RunBatch runs on a goroutine of its own: the panicking operations fail
// alone, with internal, and the process lives on. The server runs in a child process, so a
// panic that escapes fails this test instead of killing the suite.
func TestPanicInBatch(t *testing.T) {
	if os.Getenv("COORDKIT_TEST_PANIC_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPanicInBatch$", "-test.v")
		cmd.Env = append(os.Environ(), "COORDKIT_TEST_PANIC_CHILD=1")
		out, err := cmd.CombinedOutput()
		t.Logf("child: %v\n%s", err, tail(out, 1500))
		if err != nil {
			t.Errorf("the server process died: %v", err)
		}
		return
	}
	steps := redislock.New(redisconf.Pipelined(testenv.Redis(t, "")), redislock.Config{Prefix: testenv.Prefix(t)})
	inst := serveLock(t, lock.Config{
		Backends: map[string]lock.Backend{"sqlite": panicky{sqliteStore(t)(t)}, "redis": panickySteps{steps}, "lost": lostHolds{steps}},
		Default:  "sqlite",
		Logger:   slog.New(slog.DiscardHandler),
	})
	raw := client.New(inst.url, client.WithBatching(0)).Locks()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := raw.Inspect(ctx, &lockv1.InspectRequest{Key: "k"})
	wantCode(t, err, connect.CodeInternal)
	inspect := &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Inspect{Inspect: &lockv1.InspectRequest{Key: "k"}}}
	acquire := acquireOp(&lockv1.AcquireRequest{Key: "fine"})
	res, err := raw.Batch(ctx, &lockv1.BatchRequest{Operations: []*lockv1.BatchOperation{inspect, acquire, inspect}})
	if err != nil {
		t.Fatalf("batch failed as a whole: %v", err)
	}
	for i, r := range res.GetResults() {
		if i == 1 {
			if !r.GetAcquire().GetAcquired() {
				t.Errorf("the acquire next to the panics: %v", r)
			}
			continue
		}
		if r.GetError().GetCode() != connect.CodeInternal.String() {
			t.Errorf("operation %d: %v, want internal", i, r)
		}
	}
	if _, err := raw.Inspect(ctx, &lockv1.InspectRequest{Key: "k"}); connect.CodeOf(err) != connect.CodeInternal {
		t.Errorf("after the batch: %v, want the server to answer (internal)", err)
	}

	// A panic in a BatchBackend's RunSteps fails every operation of its group with internal,
	// as a panic after the engine acted fails a single call; the other operations stand.
	onRedis := func(key string) *lockv1.BatchOperation {
		return acquireOp(&lockv1.AcquireRequest{Key: key, Backend: "redis"})
	}
	res, err = raw.Batch(ctx, &lockv1.BatchRequest{Operations: []*lockv1.BatchOperation{onRedis("r1"), acquire, onRedis("r2"), onRedis("r3")}})
	if err != nil {
		t.Fatalf("batch with a panicking pipeline failed as a whole: %v", err)
	}
	r := res.GetResults()
	// "fine" is held since the batch above, so this is a busy answer: an answer, not a failure.
	if a := r[1].GetAcquire(); a == nil || a.GetAcquired() || a.GetHolder() == nil {
		t.Errorf("the sqlite acquire next to the panicking pipeline: %v, want busy", r[1])
	}
	for _, i := range []int{0, 2, 3} {
		if r[i].GetError().GetCode() != connect.CodeInternal.String() {
			t.Errorf("operation %d of the panicking pipeline: %v, want internal", i, r[i])
		}
	}
	if a, err := raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "r2", Backend: "redis"}); err != nil || !a.GetAcquired() {
		t.Errorf("a single call on redis after the panic: %v, %v; want acquired", a, err)
	}

	// A panic while one operation of a group is finished fails that operation alone: the
	// others of the group ran on the engine and get their own answers.
	onLost := func(key string) *lockv1.BatchOperation {
		return acquireOp(&lockv1.AcquireRequest{Key: key, Backend: "lost"})
	}
	res, err = raw.Batch(ctx, &lockv1.BatchRequest{Operations: []*lockv1.BatchOperation{onLost("l1"), onLost("lost"), onLost("l2")}})
	if err != nil {
		t.Fatalf("batch with a panicking finish failed as a whole: %v", err)
	}
	r = res.GetResults()
	if r[1].GetError().GetCode() != connect.CodeInternal.String() {
		t.Errorf("the operation whose finish panicked: %v, want internal", r[1])
	}
	for _, i := range []int{0, 2} {
		if !r[i].GetAcquire().GetAcquired() {
			t.Errorf("operation %d, next to a panicking finish: %v, want acquired", i, r[i])
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
