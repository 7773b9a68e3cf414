package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
)

// The batching task client against scripted services: what it does when the service is
// older (no Batch) or answers a batch wrongly. Its behaviour against the real service is
// tested in services/taskpick (batchclient_test.go).

// scriptedTasks is a task service whose Ack records the ids it acked and whose Batch, when
// set, answers every batch.
type scriptedTasks struct {
	taskpickv1connect.UnimplementedTaskPickServiceHandler
	batch func(*taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error)

	mu      sync.Mutex
	acked   map[string]int
	batches int
	// held, when set, holds the Ack of its id until the channel is closed; arrived then
	// gets the id as the Ack arrives.
	held    map[string]chan struct{}
	arrived chan string
}

func (s *scriptedTasks) Ack(ctx context.Context, req *taskpickv1.AckRequest) (*taskpickv1.AckResponse, error) {
	if h := s.held[req.GetId()]; h != nil {
		s.arrived <- req.GetId()
		select {
		case <-h:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked[req.GetId()]++
	return &taskpickv1.AckResponse{}, nil
}

func (s *scriptedTasks) Batch(_ context.Context, req *taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error) {
	s.mu.Lock()
	s.batches++
	s.mu.Unlock()
	if s.batch == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("no Batch here"))
	}
	return s.batch(req)
}

// serveScripted serves s and returns the batching client of it, one request in flight.
func serveScripted(t *testing.T, s *scriptedTasks) *batchingTasks {
	t.Helper()
	s.acked = map[string]int{}
	mux := http.NewServeMux()
	mux.Handle(taskpickv1connect.NewTaskPickServiceHandler(s))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return newBatchingTasks(taskpickv1connect.NewTaskPickServiceClient(srv.Client(), srv.URL), 1)
}

// ackAll acks n tasks from n goroutines at once and returns their errors.
func ackAll(c taskpickv1connect.TaskPickServiceClient, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = c.Ack(context.Background(), &taskpickv1.AckRequest{Pool: "p", Id: fmt.Sprint("t", i), LeaseToken: 1, LeaseSecret: "s"})
		})
	}
	wg.Wait()
	return errs
}

// TestBatchingTasksWithoutBatch: a service without Batch (an older version) answers the
// first batch unimplemented; its operations, and every call after, go out alone and
// succeed, each once.
func TestBatchingTasksWithoutBatch(t *testing.T) {
	t.Parallel()
	s := &scriptedTasks{}
	c := serveScripted(t, s)
	const n = 64
	for i, err := range ackAll(c, n) {
		if err != nil {
			t.Errorf("ack t%d: %v", i, err)
		}
	}
	if !c.calls.unbatched.Load() {
		t.Errorf("64 concurrent acks never tried a Batch (%d tried)", s.batches)
	}
	for i := range n {
		if k := s.acked[fmt.Sprint("t", i)]; k != 1 {
			t.Errorf("t%d acked %d times, want once", i, k)
		}
	}
	before := s.batches
	ackAll(c, n)
	if s.batches != before {
		t.Errorf("%d more Batch calls after the service said it has none", s.batches-before)
	}
}

// TestBatchingTasksWithoutBatchNoneWaitsForAnother: once the service is known to have no
// Batch, every call goes out on its own: an ack the service holds does not hold up another
// caller's ack, as it would behind the coalescer's one sending slot or inside a batch sent
// one call at a time.
func TestBatchingTasksWithoutBatchNoneWaitsForAnother(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := &scriptedTasks{held: map[string]chan struct{}{"slow": release}, arrived: make(chan string, 1)}
	c := serveScripted(t, s)
	defer close(release)
	for i, err := range ackAll(c, 8) { // learns that the service has no Batch
		if err != nil {
			t.Fatalf("ack t%d: %v", i, err)
		}
	}
	slow := make(chan error, 1)
	go func() {
		_, err := c.Ack(context.Background(), &taskpickv1.AckRequest{Pool: "p", Id: "slow", LeaseToken: 1, LeaseSecret: "s"})
		slow <- err
	}()
	<-s.arrived
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Ack(ctx, &taskpickv1.AckRequest{Pool: "p", Id: fmt.Sprint("fast", i), LeaseToken: 1, LeaseSecret: "s"})
		cancel()
		if err != nil {
			t.Fatalf("ack fast%d while another ack is held: %v", i, err)
		}
	}
	select {
	case err := <-slow:
		t.Fatalf("the held ack returned before it was released: %v", err)
	default:
	}
}

// TestBatchingTasksBrokenAnswers: a batch whose answer does not fit its operations fails
// every call of the batch with internal, never a success; an operation's own error reaches
// its caller with its code and message.
func TestBatchingTasksBrokenAnswers(t *testing.T) {
	t.Parallel()
	ackResult := &taskpickv1.BatchResult{Result: &taskpickv1.BatchResult_Ack{Ack: &taskpickv1.AckResponse{}}}
	tests := []struct {
		name  string
		batch func(*taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error)
		want  connect.Code
		msg   string // in every error
	}{
		{"short answer", func(req *taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error) {
			return &taskpickv1.BatchResponse{Results: []*taskpickv1.BatchResult{ackResult}}, nil
		}, connect.CodeInternal, "does not match"},
		{"wrong kind", func(req *taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error) {
			res := make([]*taskpickv1.BatchResult, len(req.GetOperations()))
			for i := range res {
				res[i] = &taskpickv1.BatchResult{Result: &taskpickv1.BatchResult_Get{Get: &taskpickv1.GetResponse{}}}
			}
			return &taskpickv1.BatchResponse{Results: res}, nil
		}, connect.CodeInternal, "answered a batched ack"},
		{"empty result", func(req *taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error) {
			return &taskpickv1.BatchResponse{Results: make([]*taskpickv1.BatchResult, len(req.GetOperations()))}, nil
		}, connect.CodeInternal, "answered a batched ack"},
		{"operation errors", func(req *taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error) {
			res := make([]*taskpickv1.BatchResult, len(req.GetOperations()))
			for i := range res {
				res[i] = &taskpickv1.BatchResult{Error: &taskpickv1.BatchError{Code: "failed_precondition", Message: "taskpick: stale"}}
			}
			return &taskpickv1.BatchResponse{Results: res}, nil
		}, connect.CodeFailedPrecondition, "taskpick: stale"},
		{"unknown code", func(req *taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error) {
			res := make([]*taskpickv1.BatchResult, len(req.GetOperations()))
			for i := range res {
				res[i] = &taskpickv1.BatchResult{Error: &taskpickv1.BatchError{Code: "on_fire", Message: "boom"}}
			}
			return &taskpickv1.BatchResponse{Results: res}, nil
		}, connect.CodeUnknown, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &scriptedTasks{batch: tt.batch}
			c := serveScripted(t, s)
			batched := 0
			for _, err := range ackAll(c, 32) {
				if err == nil {
					continue // went out alone: the first call, or one that found the slot free
				}
				batched++
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != tt.want || !strings.Contains(ce.Message(), tt.msg) {
					t.Errorf("batched ack: %v, want %v containing %q", err, tt.want, tt.msg)
				}
			}
			if batched == 0 || s.batches == 0 {
				t.Errorf("no ack went out in a batch (%d Batch calls)", s.batches)
			}
		})
	}
}

// TestBatchingTasksRefusedBatchGoesAlone: a Batch the service refuses as a whole before
// running any of it (resource_exhausted: too large) is sent again one operation at a time,
// so every ack is applied, as it would have been without batching.
func TestBatchingTasksRefusedBatchGoesAlone(t *testing.T) {
	t.Parallel()
	s := &scriptedTasks{batch: func(*taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error) {
		return nil, connect.NewError(connect.CodeResourceExhausted, errors.New("too big"))
	}}
	c := serveScripted(t, s)
	for _, err := range ackAll(c, 32) {
		if err != nil {
			t.Errorf("ack after a refused batch: %v", err)
		}
	}
	if s.batches == 0 {
		t.Error("no Batch was tried")
	}
}

// TestBatchSplitBySize pins how a batch is cut under batchBytes: in order, greedily, an
// operation over the limit alone.
func TestBatchSplitBySize(t *testing.T) {
	t.Parallel()
	op := func(kib int) *taskpickv1.BatchOperation {
		return &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Put{Put: &taskpickv1.PutRequest{
			Pool: "p", Tasks: []*taskpickv1.NewTask{{Id: "t", Payload: make([]byte, kib<<10)}},
		}}}
	}
	tests := []struct {
		name string
		kib  []int
		want []span
	}{
		{"small", []int{1, 1, 1}, []span{{0, 3}}},
		{"one", []int{700}, []span{{0, 1}}},
		{"two halves", []int{300, 300, 300}, []span{{0, 1}, {1, 2}, {2, 3}}},
		{"pairs", []int{200, 200, 200, 200, 10}, []span{{0, 2}, {2, 5}}},
		{"over the limit alone", []int{1, 900, 1, 1}, []span{{0, 1}, {1, 2}, {2, 4}}},
	}
	for _, tt := range tests {
		ops := make([]*taskpickv1.BatchOperation, len(tt.kib))
		for i, k := range tt.kib {
			ops[i] = op(k)
		}
		if got := splitBatch(ops); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: spans %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestBatchingTasksDiscoveryBatchNoneWaitsForAnother: the batch that finds out that the
// service has no Batch is not sent one call at a time on the coalescer's goroutine: each of
// its callers sends its own call, so a fast ack in it does not wait for a slow one (and its
// caller does not see deadline_exceeded for an ack the service applied).
func TestBatchingTasksDiscoveryBatchNoneWaitsForAnother(t *testing.T) {
	t.Parallel()
	gate, release := make(chan struct{}), make(chan struct{})
	s := &scriptedTasks{held: map[string]chan struct{}{"gate": gate, "slow": release}, arrived: make(chan string, 2)}
	c := serveScripted(t, s)
	defer close(release)
	go c.Ack(context.Background(), &taskpickv1.AckRequest{Pool: "p", Id: "gate", LeaseToken: 1, LeaseSecret: "s"}) // holds the one sending slot
	<-s.arrived
	go c.Ack(context.Background(), &taskpickv1.AckRequest{Pool: "p", Id: "slow", LeaseToken: 1, LeaseSecret: "s"})
	time.Sleep(100 * time.Millisecond) // slow queues behind gate
	errs := make([]error, 10)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, errs[i] = c.Ack(ctx, &taskpickv1.AckRequest{Pool: "p", Id: fmt.Sprint("fast", i), LeaseToken: 1, LeaseSecret: "s"})
		})
	}
	time.Sleep(100 * time.Millisecond) // the fast acks queue too
	close(gate)                        // all queued acks leave as one Batch: unimplemented
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			s.mu.Lock()
			n := s.acked[fmt.Sprint("fast", i)]
			s.mu.Unlock()
			t.Errorf("fast%d: %v, though the service acked it %d time(s)", i, err, n)
		}
	}
}

// TestBatchingTasksWithoutBatchKeepsCause: a call made with an ended context fails the same
// way whether or not the service has Batch: canceled or deadline_exceeded, wrapping the
// context's cause.
func TestBatchingTasksWithoutBatchKeepsCause(t *testing.T) {
	t.Parallel()
	cause := errors.New("shutting down")
	for _, unbatched := range []bool{false, true} {
		c := serveScripted(t, &scriptedTasks{})
		c.calls.unbatched.Store(unbatched)
		canceled, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		expired, cancelExpired := context.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), cause)
		for _, tc := range []struct {
			ctx  context.Context
			want connect.Code
		}{{canceled, connect.CodeCanceled}, {expired, connect.CodeDeadlineExceeded}} {
			_, err := c.Ack(tc.ctx, &taskpickv1.AckRequest{Pool: "p", Id: "x", LeaseToken: 1, LeaseSecret: "s"})
			if connect.CodeOf(err) != tc.want || !errors.Is(err, cause) {
				t.Errorf("unbatched=%v: %v, want %v wrapping %q", unbatched, err, tc.want, cause)
			}
		}
		cancelExpired()
	}
}
