package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

func acquireOp(req *lockv1.AcquireRequest) *lockv1.BatchOperation {
	return &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Acquire{Acquire: req}}
}

func releaseOp(req *lockv1.ReleaseRequest) *lockv1.BatchOperation {
	return &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Release{Release: req}}
}

// TestBatchMixedOperations sends one batch of valid and invalid operations and checks every
// operation got its own result, in order, with exactly the code and message the same
// operation gets as its own unary call; the valid ones are applied, the invalid ones change
// nothing.
func TestBatchMixedOperations(t *testing.T) {
	t.Parallel()
	for _, bc := range backends {
		if bc.name == "redlock" || bc.name == "zookeeper" { // no BatchBackend: each operation runs alone
			continue
		}
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			batchMixedOperations(t, bc)
		})
	}
}

// batchMixedOperations is TestBatchMixedOperations on one backend.
func batchMixedOperations(t *testing.T, bc backendCase) {
	inst := startInstance(t, bc.name, bc.store(t)(t))
	c := client.New(inst.url, client.WithBatching(0))
	raw := c.Locks()
	ctx := context.Background()
	ttl := durationpb.New(10 * time.Second)
	const owner = "0123456789abcdef-owner"
	held := must(raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "held", Ttl: ttl, Owner: "another-owner-0123456789"}))(t)

	tests := []struct {
		name string
		op   *lockv1.BatchOperation
		want connect.Code // 0: success
		// unary sends the operation as its own call, for the answer to compare with; nil
		// when sending it again would change the outcome (a successful acquire).
		unary func() error
	}{
		{"acquire", acquireOp(&lockv1.AcquireRequest{Key: "fresh", Ttl: ttl, Owner: owner}), 0, nil},
		{"acquire empty key", acquireOp(&lockv1.AcquireRequest{Ttl: ttl}), connect.CodeInvalidArgument,
			func() error { _, err := raw.Acquire(ctx, &lockv1.AcquireRequest{Ttl: ttl}); return err }},
		{"acquire tiny ttl", acquireOp(&lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Millisecond)}), connect.CodeInvalidArgument,
			func() error {
				_, err := raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Millisecond)})
				return err
			}},
		{"acquire unknown backend", acquireOp(&lockv1.AcquireRequest{Key: "k", Backend: "nope"}), connect.CodeInvalidArgument,
			func() error {
				_, err := raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Backend: "nope"})
				return err
			}},
		{"acquire that waits", acquireOp(&lockv1.AcquireRequest{Key: "k", Wait: durationpb.New(time.Second)}), connect.CodeInvalidArgument, nil},
		{"acquire taken", acquireOp(&lockv1.AcquireRequest{Key: "held", Ttl: ttl, Owner: owner}), 0,
			func() error {
				_, err := raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "held", Ttl: ttl, Owner: owner})
				return err
			}},
		{"release by another owner", releaseOp(&lockv1.ReleaseRequest{Key: "held", Owner: owner}), connect.CodePermissionDenied,
			func() error {
				_, err := raw.Release(ctx, &lockv1.ReleaseRequest{Key: "held", Owner: owner})
				return err
			}},
		{"release not held", releaseOp(&lockv1.ReleaseRequest{Key: "free", Owner: owner}), connect.CodeFailedPrecondition,
			func() error {
				_, err := raw.Release(ctx, &lockv1.ReleaseRequest{Key: "free", Owner: owner})
				return err
			}},
		{"release without owner", releaseOp(&lockv1.ReleaseRequest{Key: "held"}), connect.CodeInvalidArgument,
			func() error { _, err := raw.Release(ctx, &lockv1.ReleaseRequest{Key: "held"}); return err }},
		{"renew by another owner", &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Renew{Renew: &lockv1.RenewRequest{Key: "held", Owner: owner}}}, connect.CodePermissionDenied,
			func() error { _, err := raw.Renew(ctx, &lockv1.RenewRequest{Key: "held", Owner: owner}); return err }},
		{"inspect", &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Inspect{Inspect: &lockv1.InspectRequest{Key: "held"}}}, 0, nil},
		{"inspect huge key", &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Inspect{Inspect: &lockv1.InspectRequest{Key: strings.Repeat("k", 513)}}}, connect.CodeInvalidArgument,
			func() error {
				_, err := raw.Inspect(ctx, &lockv1.InspectRequest{Key: strings.Repeat("k", 513)})
				return err
			}},
		{"no operation", &lockv1.BatchOperation{}, connect.CodeInvalidArgument, nil},
	}
	ops := make([]*lockv1.BatchOperation, len(tests))
	for i, tt := range tests {
		ops[i] = tt.op
	}
	res := must(raw.Batch(ctx, &lockv1.BatchRequest{Operations: ops}))(t)
	if len(res.GetResults()) != len(ops) {
		t.Fatalf("%d results for %d operations", len(res.GetResults()), len(ops))
	}
	for i, tt := range tests {
		r := res.GetResults()[i]
		gotCode := connect.Code(0)
		if e := r.GetError(); e != nil {
			if err := gotCode.UnmarshalText([]byte(e.GetCode())); err != nil {
				t.Errorf("%s: error code %q: %v", tt.name, e.GetCode(), err)
			}
			if r.GetResult() != nil {
				t.Errorf("%s: both a result and an error", tt.name)
			}
		} else if r.GetResult() == nil {
			t.Errorf("%s: neither a result nor an error", tt.name)
		}
		if gotCode != tt.want {
			t.Errorf("%s: code %v (%s), want %v", tt.name, gotCode, r.GetError().GetMessage(), tt.want)
			continue
		}
		if tt.unary == nil {
			continue
		}
		err := tt.unary()
		if connect.CodeOf(err) != tt.want && !(tt.want == 0 && err == nil) {
			t.Errorf("%s: alone it answers %v, batched %v", tt.name, err, gotCode)
		}
		if ce := new(connect.Error); tt.want != 0 && errors.As(err, &ce) && ce.Message() != r.GetError().GetMessage() {
			t.Errorf("%s: batched message %q, alone %q", tt.name, r.GetError().GetMessage(), ce.Message())
		}
	}
	if !res.GetResults()[0].GetAcquire().GetAcquired() {
		t.Errorf("the valid acquire was not applied: %v", res.GetResults()[0])
	}
	if taken := res.GetResults()[5]; taken.GetAcquire().GetAcquired() || taken.GetAcquire().GetHolder().GetFencingToken() != held.GetLease().GetFencingToken() {
		t.Errorf("acquire of a taken lock: %v, want not acquired with the holder's token %d", taken, held.GetLease().GetFencingToken())
	}
	if st := inspect(t, c, "held"); st.GetHoldCount() != 1 {
		t.Errorf("held lock after refused operations: %v", st)
	}
	if st := inspect(t, c, "k"); st.GetHeld() {
		t.Errorf("an invalid acquire took the lock: %v", st)
	}
}

// TestBatchRequestLimits refuses, as a whole, a batch that is empty or too large.
func TestBatchRequestLimits(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	raw := client.New(inst.url, client.WithBatching(0)).Locks()
	tooMany := make([]*lockv1.BatchOperation, server.MaxBatchOperations+1)
	for i := range tooMany {
		tooMany[i] = &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Inspect{Inspect: &lockv1.InspectRequest{Key: "k"}}}
	}
	for name, ops := range map[string][]*lockv1.BatchOperation{"empty": nil, "too many": tooMany} {
		_, err := raw.Batch(context.Background(), &lockv1.BatchRequest{Operations: ops})
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s batch: %v, want invalid_argument", name, err)
		}
	}
	res := must(raw.Batch(context.Background(), &lockv1.BatchRequest{Operations: tooMany[:server.MaxBatchOperations]}))(t)
	if len(res.GetResults()) != server.MaxBatchOperations {
		t.Fatalf("%d results for a full batch", len(res.GetResults()))
	}
}

// TestBatchBackendKilledMidPipeline floods a Redis-backed instance with batches of
// acquires, each on a key of its own, and SIGKILLs Redis (which keeps every acknowledged
// write: appendfsync always) in the middle. Every operation must come back either acquired
// or unavailable, never anything else; after Redis restarts from its log, every acquire
// that was answered acquired is held with that very fencing token, and every key is either
// free or held once: no script was half applied or applied twice.
func TestBatchBackendKilledMidPipeline(t *testing.T) {
	t.Parallel()
	rp := testenv.StartRedisWith(t, testenv.RedisConfig{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	rdb := redis.NewClient(&redis.Options{Addr: rp.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	inst := serveLock(t, lock.Config{
		Backends: map[string]lock.Backend{"redis": redislock.New(redisconf.Pipelined(rdb), redislock.Config{})},
		Logger:   slog.New(slog.DiscardHandler), // every batch after the kill logs its failures
	})
	raw := client.New(inst.url, client.WithBatching(0)).Locks()
	ttl := durationpb.New(time.Hour)

	const senders, perBatch = 4, 50
	type outcome struct {
		key   string
		token uint64 // 0: unavailable
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		bad      []string
	)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	firstAnswered := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				ops := make([]*lockv1.BatchOperation, perBatch)
				keys := make([]string, perBatch)
				for i := range ops {
					keys[i] = fmt.Sprintf("k-%d-%d-%d", s, n, i)
					ops[i] = acquireOp(&lockv1.AcquireRequest{Key: keys[i], Ttl: ttl})
				}
				res, err := raw.Batch(context.Background(), &lockv1.BatchRequest{Operations: ops})
				mu.Lock()
				if err != nil {
					bad = append(bad, fmt.Sprintf("batch call failed as a whole: %v", err))
				}
				for i, r := range res.GetResults() {
					switch {
					case r.GetAcquire().GetAcquired():
						outcomes = append(outcomes, outcome{keys[i], r.GetAcquire().GetLease().GetFencingToken()})
					case r.GetError().GetCode() == connect.CodeUnavailable.String():
						outcomes = append(outcomes, outcome{keys[i], 0})
					default:
						bad = append(bad, fmt.Sprintf("%s: %v", keys[i], r))
					}
				}
				mu.Unlock()
				once.Do(func() { close(firstAnswered) })
			}
		})
	}
	select {
	case <-firstAnswered:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch answered in 30s")
	}
	time.Sleep(100 * time.Millisecond) // batches in flight on every sender
	rp.Stop()
	time.Sleep(200 * time.Millisecond) // batches sent to a dead Redis
	stop()
	wg.Wait()
	rp.Start()
	// The service's Redis pool reports its last dial error until its own redial (every
	// second) succeeds.
	c := client.New(inst.url)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Locks().Inspect(context.Background(), &lockv1.InspectRequest{Key: "probe"})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis not back 30s after its restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, b := range bad {
		t.Error(b)
	}
	var acquired, unavailable int
	for _, o := range outcomes {
		st := inspect(t, c, o.key)
		switch {
		case o.token != 0:
			acquired++
			if !st.GetHeld() || st.GetFencingToken() != o.token || st.GetHoldCount() != 1 {
				t.Errorf("%s was answered acquired with token %d; after the restart: %v", o.key, o.token, st)
			}
		default:
			unavailable++
			if st.GetHeld() && st.GetHoldCount() != 1 {
				t.Errorf("%s was answered unavailable; after the restart it is held %d times", o.key, st.GetHoldCount())
			}
		}
	}
	t.Logf("%d acquires answered acquired, %d unavailable", acquired, unavailable)
	if acquired == 0 || unavailable == 0 {
		t.Fatalf("the kill did not fall in the middle of the flood: %d acquired, %d unavailable", acquired, unavailable)
	}
}
