package lock_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

// roundTrips counts what a Redis client sends: pipelines and the commands in them, and
// commands sent alone. The handshake of a connection the pool dials meanwhile (HELLO, CLIENT
// SETINFO) is not counted: it is not the batch's.
type roundTrips struct {
	mu        sync.Mutex
	pipelines []int // commands per pipeline
	alone     []string
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !testenv.RedisHandshake(cmd) {
			r.mu.Lock()
			r.alone = append(r.alone, cmd.Name())
			r.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if !testenv.RedisHandshake(cmd) {
				n++
			}
		}
		if n > 0 {
			r.mu.Lock()
			r.pipelines = append(r.pipelines, n)
			r.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (r *roundTrips) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pipelines, r.alone = nil, nil
}

func (r *roundTrips) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("pipelines of %v commands, %v alone", r.pipelines, r.alone)
}

// TestBatchIsOnePipeline: a batch's operations on Redis reach it as one pipeline, one
// round trip, whatever their kinds and however many fail; the invalid ones send nothing.
// Each still gets the answer its single call gets.
func TestBatchIsOnePipeline(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t, "")
	var trips roundTrips
	rdb.AddHook(&trips)
	prefix := testenv.Prefix(t)
	inst := serveLock(t, lock.Config{
		Backends: map[string]lock.Backend{"redis": redislock.New(redisconf.Pipelined(rdb), redislock.Config{Prefix: prefix})},
		Logger:   slog.New(slog.DiscardHandler),
	})
	raw := client.New(inst.url, client.WithBatching(0)).Locks()
	ctx := context.Background()
	ttl := durationpb.New(time.Minute)
	const owner = "0123456789abcdef-owner"
	held := must(raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "held", Ttl: ttl, Owner: owner}))(t)
	// Redis knows every script from here on (a script it does not know costs a second trip).
	_, _ = raw.Release(ctx, &lockv1.ReleaseRequest{Key: "free", Owner: owner})
	_, _ = raw.Renew(ctx, &lockv1.RenewRequest{Key: "held", Owner: owner})
	_, _ = raw.Inspect(ctx, &lockv1.InspectRequest{Key: "held"})

	const keys = 40
	var ops []*lockv1.BatchOperation
	for i := range keys {
		ops = append(ops, acquireOp(&lockv1.AcquireRequest{Key: fmt.Sprintf("k%d", i), Ttl: ttl}))
	}
	ops = append(ops,
		acquireOp(&lockv1.AcquireRequest{Key: "held", Ttl: ttl, Owner: owner}), // re-entry
		acquireOp(&lockv1.AcquireRequest{Key: "held", Ttl: ttl}),               // busy
		releaseOp(&lockv1.ReleaseRequest{Key: "free", Owner: owner}),           // not held
		&lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Renew{Renew: &lockv1.RenewRequest{Key: "held", Owner: owner}}},
		&lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Inspect{Inspect: &lockv1.InspectRequest{Key: "held"}}},
		acquireOp(&lockv1.AcquireRequest{Ttl: ttl}), // invalid: no key
	)
	trips.reset()
	res := must(raw.Batch(ctx, &lockv1.BatchRequest{Operations: ops}))(t)
	if got := trips.String(); got != fmt.Sprintf("pipelines of [%d] commands, [] alone", len(ops)-1) {
		t.Errorf("Redis saw %s; want one pipeline of the %d valid operations", got, len(ops)-1)
	}
	r := res.GetResults()
	for i := range keys {
		if !r[i].GetAcquire().GetAcquired() || r[i].GetAcquire().GetLease().GetFencingToken() == 0 {
			t.Errorf("acquire k%d: %v", i, r[i])
		}
	}
	if l := r[keys].GetAcquire().GetLease(); l.GetHoldCount() != 2 || l.GetFencingToken() != held.GetLease().GetFencingToken() || l.GetOwner() != owner {
		t.Errorf("re-entry: %v, want hold count 2 with token %d and the caller's owner", r[keys], held.GetLease().GetFencingToken())
	}
	if a := r[keys+1].GetAcquire(); a.GetAcquired() || a.GetHolder().GetFencingToken() != held.GetLease().GetFencingToken() {
		t.Errorf("busy acquire: %v", r[keys+1])
	}
	if r[keys+2].GetError().GetCode() != "failed_precondition" {
		t.Errorf("release of a free lock: %v", r[keys+2])
	}
	if l := r[keys+3].GetRenew().GetLease(); l.GetOwner() != owner || l.GetFencingToken() != held.GetLease().GetFencingToken() {
		t.Errorf("renew: %v", r[keys+3])
	}
	if st := r[keys+4].GetInspect().GetState(); !st.GetHeld() || st.GetFencingToken() != held.GetLease().GetFencingToken() {
		t.Errorf("inspect: %v", r[keys+4])
	}
	if r[keys+5].GetError().GetCode() != "invalid_argument" {
		t.Errorf("acquire without a key: %v", r[keys+5])
	}
}

// TestBatchAfterScriptFlush: a batch sent after Redis lost its script cache (SCRIPT FLUSH, a
// restart, a failover) still runs every operation once: the scripts the server answered
// NOSCRIPT did not run, and run again with their source.
func TestBatchAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rp := testenv.StartRedisWith(t, testenv.RedisConfig{})
	rdb := redis.NewClient(&redis.Options{Addr: rp.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	inst := serveLock(t, lock.Config{
		Backends: map[string]lock.Backend{"redis": redislock.New(redisconf.Pipelined(rdb), redislock.Config{})},
		Logger:   slog.New(slog.DiscardHandler),
	})
	raw := client.New(inst.url, client.WithBatching(0)).Locks()
	ctx := context.Background()
	ttl := durationpb.New(time.Minute)
	for round := range 3 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var ops []*lockv1.BatchOperation
		for i := range 20 {
			ops = append(ops, acquireOp(&lockv1.AcquireRequest{Key: fmt.Sprintf("r%d-%d", round, i), Ttl: ttl, Owner: "0123456789abcdef-owner"}))
		}
		res := must(raw.Batch(ctx, &lockv1.BatchRequest{Operations: ops}))(t)
		for i, r := range res.GetResults() {
			if l := r.GetAcquire().GetLease(); l.GetHoldCount() != 1 {
				t.Errorf("round %d, acquire %d: %v, want acquired once", round, i, r)
			}
		}
	}
}

// onlyScripter hides every method of a client but redis.Scripter's.
type onlyScripter struct{ redis.Scripter }

// TestRunStepsWithoutPipelines: a backend on a redis.Scripter that cannot pipeline (no client
// under it) still answers each step of a batch as its single call would.
func TestRunStepsWithoutPipelines(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t, "")
	inst := serveLock(t, lock.Config{
		Backends: map[string]lock.Backend{"redis": redislock.New(onlyScripter{rdb}, redislock.Config{Prefix: testenv.Prefix(t)})},
		Logger:   slog.New(slog.DiscardHandler),
	})
	raw := client.New(inst.url, client.WithBatching(0)).Locks()
	ctx := context.Background()
	ttl := durationpb.New(time.Minute)
	const owner = "0123456789abcdef-owner"
	ops := []*lockv1.BatchOperation{
		acquireOp(&lockv1.AcquireRequest{Key: "a", Ttl: ttl, Owner: owner}),
		acquireOp(&lockv1.AcquireRequest{Key: "a", Ttl: ttl, Owner: owner}),
		releaseOp(&lockv1.ReleaseRequest{Key: "b", Owner: owner}),
	}
	res := must(raw.Batch(ctx, &lockv1.BatchRequest{Operations: ops}))(t)
	r := res.GetResults()
	counts := []uint32{r[0].GetAcquire().GetLease().GetHoldCount(), r[1].GetAcquire().GetLease().GetHoldCount()}
	if !(counts[0] == 1 && counts[1] == 2 || counts[0] == 2 && counts[1] == 1) {
		t.Errorf("two acquires by one owner: hold counts %v, want 1 and 2", counts)
	}
	if r[2].GetError().GetCode() != "failed_precondition" {
		t.Errorf("release of a free lock: %v", r[2])
	}
}
