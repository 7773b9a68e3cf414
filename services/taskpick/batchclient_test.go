package taskpick_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/testenv"
)

// The SDK's batching of task calls (libs/client), against the real service and backends:
// concurrent calls share Batch requests, and each still gets exactly its own answer.

// sentRequest is one request the SDK sent: its procedure, and for a Batch the operations.
type sentRequest struct {
	procedure string
	ops       []*taskpickv1.BatchOperation
	bytes     int
}

// recorder is an HTTP transport that records every task request the SDK sends, and holds
// the first one for hold, so that the calls made meanwhile queue behind it.
type recorder struct {
	base http.RoundTripper
	hold time.Duration
	// first is closed when the first request arrived.
	first chan struct{}

	once sync.Once
	mu   sync.Mutex
	sent []sentRequest
}

func newRecorder(hold time.Duration) *recorder {
	return &recorder{base: client.DefaultHTTPClient().Transport, hold: hold, first: make(chan struct{})}
}

// RoundTrip implements http.RoundTripper.
func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	s := sentRequest{procedure: req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:], bytes: len(body)}
	if s.procedure == "Batch" {
		var b taskpickv1.BatchRequest
		if err := proto.Unmarshal(body, &b); err != nil {
			return nil, fmt.Errorf("test: a Batch body that is not a BatchRequest: %w", err)
		}
		s.ops = b.GetOperations()
	}
	r.mu.Lock()
	r.sent = append(r.sent, s)
	r.mu.Unlock()
	first := false
	r.once.Do(func() { first = true; close(r.first) })
	if first {
		time.Sleep(r.hold)
	}
	return r.base.RoundTrip(req)
}

// requests returns what was sent so far.
func (r *recorder) requests() []sentRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sentRequest(nil), r.sent...)
}

// acksSent counts, per task id, the Acks sent alone and inside Batch requests, and how many
// Batch requests carried Acks.
func (r *recorder) acksSent() (perID map[string]int, batches int) {
	perID = map[string]int{}
	for _, s := range r.requests() {
		if s.procedure == "Ack" {
			perID["(unary)"]++ // the unary body was not decoded: counted apart
		}
		n := 0
		for _, op := range s.ops {
			if a := op.GetAck(); a != nil {
				perID[a.GetId()]++
				n++
			}
		}
		if n > 0 {
			batches++
		}
	}
	return perID, batches
}

// batchingClient is a client of in whose task calls go through rec, batching with at most
// maxInFlight requests in flight.
func batchingClient(in *instance, rec *recorder, maxInFlight int) taskpickv1connect.TaskPickServiceClient {
	return client.New(in.url, client.WithHTTPClient(&http.Client{Transport: rec}), client.WithBatching(maxInFlight)).Tasks()
}

// TestBatchingClientAcks acks many tasks from as many goroutines at once through the SDK,
// on every backend: the acks share Batch requests, every task is acked exactly once, and a
// stale ack (a token that is not the lease's) in the middle of them fails alone, with the
// code and message its own call gets, while the good acks of its batch succeed.
func TestBatchingClientAcks(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const n = 300
			in, p := one(t, b), pool(t, "acks")
			ids := workIDs(n + 1)
			tasks := make([]*taskpickv1.NewTask, len(ids))
			for i, id := range ids {
				tasks[i] = task(id)
			}
			put(t, in, p, tasks...)
			tokens, secrets := map[string]uint64{}, map[string]string{}
			for len(tokens) < len(ids) {
				for _, lt := range pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 100, Ttl: sec(time.Minute)}) {
					tokens[lt.GetId()], secrets[lt.GetId()] = lt.GetLeaseToken(), lt.GetLeaseSecret()
				}
			}
			victim, good := ids[n], ids[:n]

			rec := newRecorder(200 * time.Millisecond)
			tc := batchingClient(in, rec, 1)
			errs := make([]error, n)
			var wg sync.WaitGroup
			ack := func(i int) {
				_, errs[i] = tc.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: good[i], LeaseToken: tokens[good[i]], LeaseSecret: secrets[good[i]]})
			}
			wg.Go(func() { ack(0) })
			<-rec.first // the first ack holds the only slot: every call below queues behind it
			var staleErr error
			for i := 1; i < n; i++ {
				wg.Go(func() { ack(i) })
				if i == n/2 {
					wg.Go(func() {
						_, staleErr = tc.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: victim, LeaseToken: tokens[victim] + 1, LeaseSecret: secrets[victim]})
					})
				}
			}
			wg.Wait()

			for i, err := range errs {
				if err != nil {
					t.Errorf("ack of %s: %v, want success", good[i], err)
				}
			}
			_, alone := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: victim, LeaseToken: tokens[victim] + 1, LeaseSecret: secrets[victim]})
			if connect.CodeOf(staleErr) != connect.CodeFailedPrecondition || connect.CodeOf(alone) != connect.CodeFailedPrecondition {
				t.Errorf("stale ack: batched %v, alone %v; want failed_precondition", staleErr, alone)
			} else if b, a := staleErr.(*connect.Error).Message(), alone.(*connect.Error).Message(); b != a {
				t.Errorf("stale ack: batched message %q, alone %q", b, a)
			}

			perID, batches := rec.acksSent()
			if perID["(unary)"] != 1 {
				t.Errorf("%d acks went out alone, want only the first (which held the slot)", perID["(unary)"])
			}
			if batches == 0 {
				t.Fatalf("no Batch request carried acks: %d requests", len(rec.requests()))
			}
			for _, id := range good[1:] {
				if perID[id] != 1 {
					t.Errorf("the ack of %s was sent %d times, want once", id, perID[id])
				}
			}
			victimWithGood := false
			for _, s := range rec.requests() {
				for _, op := range s.ops {
					victimWithGood = victimWithGood || (op.GetAck().GetId() == victim && len(s.ops) > 1)
				}
			}
			if !victimWithGood {
				t.Errorf("the stale ack did not go out in a batch with good ones")
			}
			t.Logf("%d acks in %d requests (%d Batch)", n+1, len(rec.requests()), batches)

			// Every good ack was applied once: the task is gone and a second ack is refused.
			for _, id := range good {
				_, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: id, LeaseToken: tokens[id], LeaseSecret: secrets[id]})
				if connect.CodeOf(err) != connect.CodeNotFound {
					t.Errorf("second ack of %s: %v, want not_found", id, err)
				}
			}
			if st := get(t, in, p, victim); st.GetState() != taskpickv1.State_STATE_LEASED {
				t.Errorf("the stale ack changed its task: %v", st)
			}
			if s := stats(t, in, p); s.GetLeased() != 1 || s.GetAvailable()+s.GetDone()+s.GetDead() != 0 {
				t.Errorf("pool after the acks: %v, want only the stale ack's task, leased", s)
			}
		})
	}
}

// TestBatchingClientMixedCalls sends Puts, Gets, Extends and Nacks at once through the SDK:
// each answers what its own call would, so the calls of a batch never see each other's
// answers.
func TestBatchingClientMixedCalls(t *testing.T) {
	t.Parallel()
	in, p := startInstance(t, "redis", redisStore(t)(t), nil), pool(t, "mixed-sdk")
	put(t, in, p, task("leased"), task("other"))
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p, Ttl: sec(time.Minute)})[0]
	rec := newRecorder(100 * time.Millisecond)
	tc := batchingClient(in, rec, 1)

	tests := []struct {
		name string
		call func() error
		want connect.Code
	}{
		{"first, alone", func() error { _, err := tc.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "other"}); return err }, 0},
		{"put", func() error {
			r, err := tc.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{task("new"), task("other")}})
			if err == nil && (len(r.GetCreated()) != 2 || !r.GetCreated()[0] || r.GetCreated()[1]) {
				return fmt.Errorf("created %v, want [true false]", r.GetCreated())
			}
			return err
		}, 0},
		{"put invalid", func() error { _, err := tc.Put(ctx, &taskpickv1.PutRequest{Pool: p}); return err }, connect.CodeInvalidArgument},
		{"get", func() error {
			r, err := tc.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "leased"})
			if err == nil && r.GetTask().GetState() != taskpickv1.State_STATE_LEASED {
				return fmt.Errorf("task %v, want leased", r.GetTask())
			}
			return err
		}, 0},
		{"get missing", func() error { _, err := tc.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "missing"}); return err }, connect.CodeNotFound},
		{"extend", func() error {
			r, err := tc.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "leased", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret(), Ttl: sec(time.Hour)})
			if err == nil && time.Until(r.GetExpiresAt().AsTime()) < 50*time.Minute {
				return fmt.Errorf("expires at %v, want in an hour", r.GetExpiresAt().AsTime())
			}
			return err
		}, 0},
		{"nack stale", func() error {
			_, err := tc.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "leased", LeaseToken: lt.GetLeaseToken() + 1, LeaseSecret: lt.GetLeaseSecret()})
			return err
		}, connect.CodeFailedPrecondition},
	}
	errs := make([]error, len(tests))
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = tests[0].call() })
	<-rec.first
	for i := 1; i < len(tests); i++ {
		wg.Go(func() { errs[i] = tests[i].call() })
	}
	wg.Wait()
	for i, tt := range tests {
		if got := connect.CodeOf(errs[i]); got != tt.want && !(tt.want == 0 && errs[i] == nil) {
			t.Errorf("%s: %v, want %v", tt.name, errs[i], tt.want)
		}
	}
	if reqs := rec.requests(); len(reqs) != 2 || len(reqs[1].ops) != len(tests)-1 {
		t.Errorf("sent %d requests, want the first call alone and the %d others in one Batch", len(reqs), len(tests)-1)
	}
}

// TestBatchingClientLargePuts puts large tasks from many goroutines at once: each fits the
// service's request limit alone, together they would not. The SDK splits them over several
// Batch requests under the limit, so every Put succeeds as it would alone.
func TestBatchingClientLargePuts(t *testing.T) {
	t.Parallel()
	in, p := startInstance(t, "sqlite", sqliteStore(t)(t), nil), pool(t, "large")
	rec := newRecorder(100 * time.Millisecond)
	tc := batchingClient(in, rec, 1)
	const n = 12
	payload := bytes.Repeat([]byte("p"), 200<<10)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	putOne := func(i int) {
		r, err := tc.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{{Id: fmt.Sprint("big-", i), Payload: payload}}})
		if err == nil && (len(r.GetCreated()) != 1 || !r.GetCreated()[0]) {
			err = fmt.Errorf("created %v, want [true]", r.GetCreated())
		}
		errs[i] = err
	}
	wg.Go(func() { putOne(0) })
	<-rec.first
	for i := 1; i <= n; i++ {
		wg.Go(func() { putOne(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("put big-%d: %v", i, err)
		}
	}
	batches := 0
	for _, s := range rec.requests() {
		if s.bytes > 1<<20 {
			t.Errorf("a %s request of %d bytes, over the service's 1 MiB limit", s.procedure, s.bytes)
		}
		if len(s.ops) > 1 {
			batches++
		}
	}
	if batches < 2 {
		t.Errorf("%d Batch requests, want the queued Puts split over several", batches)
	}
	if s := stats(t, in, p); s.GetAvailable() != n+1 {
		t.Errorf("%d tasks available, want %d", s.GetAvailable(), n+1)
	}
}

// TestWorkAcksShareBatches runs a Work pool of many handlers through the SDK: the acks of
// handlers that finish together share Batch requests, and every task is acked exactly once.
func TestWorkAcksShareBatches(t *testing.T) {
	t.Parallel()
	url := workServer(t)
	for _, backend := range workBackends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const n, concurrency = 400, 32
			rec := newRecorder(0)
			c := client.New(url, client.WithHTTPClient(&http.Client{Transport: rec}))
			pool := testenv.Prefix(t)
			workPut(t, c, backend, pool, workIDs(n))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var done atomic.Int32
			handler := func(context.Context, *client.Task) error {
				if done.Add(1) == n {
					cancel()
				}
				return nil
			}
			var stats client.WorkStats
			runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend),
				client.WithConcurrency(concurrency), client.WithBatch(concurrency), client.WithWorkStats(&stats))

			perID, batches := rec.acksSent()
			total := 0
			for _, k := range perID {
				total += k
			}
			if total != n || stats.Acked.Load() != n {
				t.Errorf("%d acks sent, %d acked, want %d", total, stats.Acked.Load(), n)
			}
			for id, k := range perID {
				if id != "(unary)" && k != 1 {
					t.Errorf("the ack of %s was sent %d times, want once", id, k)
				}
			}
			if batches == 0 {
				t.Errorf("no Batch request carried acks: %d acks went out alone", perID["(unary)"])
			}
			if st := workStats(t, c, backend, pool); st.GetAvailable()+st.GetLeased()+st.GetDelayed()+st.GetDead() != 0 {
				t.Errorf("pool after Work: %v, want empty", st)
			}
			t.Logf("%d acks: %d alone, the rest in %d Batch requests", n, perID["(unary)"], batches)
		})
	}
}

// TestBatchingClientGetsOfLargeTasks gets one 256 KiB task from 40 goroutines at once through
// the SDK: their Gets share a Batch whose answer has room for only some of them; the others
// come back resource_exhausted from the service, and the SDK sends those again alone, so
// every caller gets the task.
func TestBatchingClientGetsOfLargeTasks(t *testing.T) {
	t.Parallel()
	in, p := one(t, backendNamed("sqlite")), pool(t, "big-sdk-gets")
	payload := bytes.Repeat([]byte("x"), 256<<10)
	put(t, in, p, &taskpickv1.NewTask{Id: "big", Payload: payload})
	rec := newRecorder(200 * time.Millisecond)
	tc := batchingClient(in, rec, 1)
	const n = 40
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := tc.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "big"})
			if err == nil && !bytes.Equal(r.GetTask().GetPayload(), payload) {
				err = fmt.Errorf("payload of %d bytes", len(r.GetTask().GetPayload()))
			}
			errs[i] = err
		})
		if i == 0 {
			<-rec.first // the first Get holds the one slot; the others queue into one batch
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Get %d through the SDK: %v", i, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	biggest := 0
	for _, s := range rec.sent {
		biggest = max(biggest, len(s.ops))
	}
	if biggest <= 12 {
		t.Fatalf("the largest batch had %d Gets: the answer limit was never reached, so the test proves nothing", biggest)
	}
}
