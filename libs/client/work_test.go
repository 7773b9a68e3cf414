package client_test

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
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
)

// fakeTasks is a scripted task-pick service: Pick hands out the queued tasks (or fails with
// pickErr), Extend fails with extendErr, and every Ack and Nack is recorded.
type fakeTasks struct {
	taskpickv1connect.UnimplementedTaskPickServiceHandler

	mu        sync.Mutex
	queue     []*taskpickv1.LeasedTask
	pickErr   error
	extendErr error
	// silentExtend makes Extend never answer, as a service cut off by the network.
	silentExtend bool
	// pickTaken is when the last Pick that leased tasks was taken up: their leases end ttl
	// after it.
	pickTaken  time.Time
	overAnswer int // Pick hands out this many tasks more than asked, as a broken service might
	picks      int
	acks       []string
	nacks      []*taskpickv1.NackRequest
}

func (f *fakeTasks) Pick(ctx context.Context, req *taskpickv1.PickRequest) (*taskpickv1.PickResponse, error) {
	taken := time.Now()
	f.mu.Lock()
	f.picks++
	if f.pickErr != nil {
		defer f.mu.Unlock()
		return nil, f.pickErr
	}
	n := min(int(max(req.GetCount(), 1))+f.overAnswer, len(f.queue))
	tasks := f.queue[:n]
	f.queue = f.queue[n:]
	f.mu.Unlock()
	if len(tasks) == 0 { // hold the Pick as the service does, until its wait or the caller ends
		t := time.NewTimer(req.GetWait().AsDuration())
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return &taskpickv1.PickResponse{}, nil
	}
	f.mu.Lock()
	f.pickTaken = taken
	f.mu.Unlock()
	for _, t := range tasks { // as the service reckons them: from when it took the call up
		t.ExpiresAt = timestamppb.New(taken.Add(req.GetTtl().AsDuration()))
		t.ExpiresAfter = req.GetTtl()
	}
	return &taskpickv1.PickResponse{Tasks: tasks}, nil
}

func (f *fakeTasks) Extend(ctx context.Context, req *taskpickv1.ExtendRequest) (*taskpickv1.ExtendResponse, error) {
	taken := time.Now()
	f.mu.Lock()
	silent := f.silentExtend
	err := f.extendErr
	f.mu.Unlock()
	if silent {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	return &taskpickv1.ExtendResponse{ExpiresAt: timestamppb.New(taken.Add(req.GetTtl().AsDuration())), ExpiresAfter: req.GetTtl()}, nil
}

func (f *fakeTasks) Ack(_ context.Context, req *taskpickv1.AckRequest) (*taskpickv1.AckResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks = append(f.acks, req.GetId())
	return &taskpickv1.AckResponse{}, nil
}

func (f *fakeTasks) Nack(_ context.Context, req *taskpickv1.NackRequest) (*taskpickv1.NackResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nacks = append(f.nacks, req)
	return &taskpickv1.NackResponse{}, nil
}

func (f *fakeTasks) snapshot() (picks int, acks []string, nacks []*taskpickv1.NackRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.picks, append([]string(nil), f.acks...), append([]*taskpickv1.NackRequest(nil), f.nacks...)
}

// serveFake serves f and returns a client of it, made with opts.
func serveFake(t *testing.T, f *fakeTasks, opts ...client.Option) *client.Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(taskpickv1connect.NewTaskPickServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return client.New(srv.URL, opts...)
}

func leased(id string, token uint64) *taskpickv1.LeasedTask {
	return &taskpickv1.LeasedTask{Id: id, LeaseToken: token, Attempt: 1, MaxAttempts: 25}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for attempt, want := range map[uint32]time.Duration{
		0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 512 * time.Second,
		11: client.MaxBackoff, 64: client.MaxBackoff, 1000: client.MaxBackoff,
	} {
		if got := client.DefaultBackoff(attempt); got != want {
			t.Errorf("DefaultBackoff(%d) = %v, want %v", attempt, got, want)
		}
	}
}

func TestWorkRejectsBadOptions(t *testing.T) {
	t.Parallel()
	c := client.New("http://127.0.0.1:1")
	nop := func(context.Context, *client.Task) error { return nil }
	for name, opts := range map[string][]client.WorkOption{
		"concurrency 0":          {client.WithConcurrency(0)},
		"batch over concurrency": {client.WithConcurrency(2), client.WithBatch(3)},
		"batch 0":                {client.WithBatch(0)},
		"ttl 0":                  {client.WithLeaseTTL(0)},
		"negative poll wait":     {client.WithPollWait(-time.Second)},
		"nil backoff":            {client.WithBackoff(nil)},
	} {
		if err := c.Work(context.Background(), "p", nop, opts...); err == nil || !strings.HasPrefix(err.Error(), "client: work:") {
			t.Errorf("%s: Work = %v, want a client: work: error", name, err)
		}
	}
	if err := c.Work(context.Background(), "p", nil); err == nil {
		t.Error("Work with a nil handler succeeded")
	}
}

// TestWorkBacksOffOnUnavailable: a Pick that keeps failing on a transient error is retried
// with growing pauses, never in a tight loop, until ctx ends (nil).
func TestWorkBacksOffOnUnavailable(t *testing.T) {
	t.Parallel()
	f := &fakeTasks{pickErr: connect.NewError(connect.CodeUnavailable, errors.New("backend down"))}
	c := serveFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var stats client.WorkStats
	if err := c.Work(ctx, "p", func(context.Context, *client.Task) error { return nil }, client.WithWorkStats(&stats)); err != nil {
		t.Fatalf("Work = %v, want nil when ctx ends", err)
	}
	// Pauses from 100ms doubling, jittered down to half: about 5 Picks in 1.5s; a spinning
	// loop would make thousands.
	picks, _, _ := f.snapshot()
	if picks < 2 || picks > 12 {
		t.Fatalf("%d Picks in 1.5s of unavailable, want a handful (backoff from 100ms to 5s)", picks)
	}
	if got := stats.PickErrors.Load(); got != uint64(picks) {
		t.Errorf("PickErrors = %d, want %d", got, picks)
	}
}

// TestWorkStopsOnBadRequest: an error no retry can fix ends Work with that error.
func TestWorkStopsOnBadRequest(t *testing.T) {
	t.Parallel()
	f := &fakeTasks{pickErr: connect.NewError(connect.CodeInvalidArgument, errors.New("backend: \"nope\" is not configured"))}
	c := serveFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Work(ctx, "p", func(context.Context, *client.Task) error { return nil })
	if connect.CodeOf(err) != connect.CodeInvalidArgument || ctx.Err() != nil {
		t.Fatalf("Work = %v, want the invalid_argument at once", err)
	}
}

// TestWorkLeaseGone: when Extend answers that the lease is gone, the handler's context is
// canceled with ErrLeaseLost and the task is neither acked nor nacked.
func TestWorkLeaseGone(t *testing.T) {
	t.Parallel()
	f := &fakeTasks{
		queue:     []*taskpickv1.LeasedTask{leased("a", 7)},
		extendErr: connect.NewError(connect.CodeFailedPrecondition, errors.New("not the task's current lease")),
	}
	c := serveFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	causes := make(chan error, 1)
	var stats client.WorkStats
	handler := func(hctx context.Context, task *client.Task) error {
		<-hctx.Done()
		causes <- context.Cause(hctx)
		cancel()
		return hctx.Err()
	}
	start := time.Now()
	if err := c.Work(ctx, "p", handler, client.WithLeaseTTL(time.Second), client.WithPollWait(time.Second), client.WithWorkStats(&stats)); err != nil {
		t.Fatalf("Work = %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("lease loss took %v, want about a third of the 1s ttl", took)
	}
	if cause := <-causes; !errors.Is(cause, client.ErrLeaseLost) || connect.CodeOf(cause) != connect.CodeFailedPrecondition {
		t.Fatalf("handler context's cause = %v, want ErrLeaseLost wrapping the failed_precondition", cause)
	}
	_, acks, nacks := f.snapshot()
	if len(acks) != 0 || len(nacks) != 0 || stats.LeasesLost.Load() != 1 {
		t.Fatalf("after the loss: acks %v, nacks %v, LeasesLost %d; want none, none, 1", acks, nacks, stats.LeasesLost.Load())
	}
}

// TestWorkShutdownGivesBack: when ctx ends, a handler that fails because of it has its task
// nacked with no retry delay, and one that finished has its task acked.
func TestWorkShutdownGivesBack(t *testing.T) {
	t.Parallel()
	f := &fakeTasks{queue: []*taskpickv1.LeasedTask{leased("blocks", 1), leased("done", 2)}}
	c := serveFake(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	var started sync.WaitGroup
	started.Add(2)
	go func() { started.Wait(); cancel() }()
	handler := func(hctx context.Context, task *client.Task) error {
		started.Done()
		<-hctx.Done()
		if task.ID == "done" {
			return nil
		}
		return hctx.Err()
	}
	if err := c.Work(ctx, "p", handler, client.WithConcurrency(2), client.WithBatch(2), client.WithBackoff(func(uint32) time.Duration { return time.Hour })); err != nil {
		t.Fatalf("Work = %v", err)
	}
	_, acks, nacks := f.snapshot()
	if len(acks) != 1 || acks[0] != "done" {
		t.Fatalf("acks %v, want [done]", acks)
	}
	if len(nacks) != 1 || nacks[0].GetId() != "blocks" || nacks[0].GetRetryAfter().AsDuration() != 0 || nacks[0].GetLeaseToken() != 1 {
		t.Fatalf("nacks %v, want blocks with token 1 and no retry delay", nacks)
	}
}

// TestWorkOverAnsweringService: a Pick answered with more tasks than asked (a broken or
// hostile service) must not run more handlers than the concurrency, of one slot or several,
// nor wedge Work: the extras are given back at once, every task is handled once, and
// Work stops when asked.
func TestWorkOverAnsweringService(t *testing.T) {
	t.Parallel()
	for _, concurrency := range []int{1, 3} {
		t.Run(fmt.Sprintf("concurrency%d", concurrency), func(t *testing.T) {
			t.Parallel()
			testWorkOverAnswered(t, concurrency)
		})
	}
}

func testWorkOverAnswered(t *testing.T, concurrency int) {
	var queue []*taskpickv1.LeasedTask
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for i, id := range ids {
		queue = append(queue, leased(id, uint64(i+1)))
	}
	f := &fakeTasks{overAnswer: 2, queue: queue}
	c := serveFake(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	running, most := 0, 0
	handled := map[string]int{}
	handler := func(_ context.Context, task *client.Task) error {
		mu.Lock()
		running++
		most = max(most, running)
		handled[task.ID]++
		if len(handled) == len(ids) {
			cancel()
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- c.Work(ctx, "p", handler, client.WithConcurrency(concurrency), client.WithBatch(concurrency))
	}()
	// The over-answered tasks come back to the queue through their Nacks.
	go func() {
		for ctx.Err() == nil {
			f.mu.Lock()
			for _, n := range f.nacks {
				f.queue = append(f.queue, leased(n.GetId(), n.GetLeaseToken()+10))
			}
			f.nacks = nil
			f.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Work = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Work did not stop within 30s of its context ending (handled %v)", handled)
	}
	mu.Lock()
	defer mu.Unlock()
	if most > concurrency {
		t.Errorf("%d handlers ran at once with concurrency %d", most, concurrency)
	}
	for _, id := range ids {
		if handled[id] != 1 {
			t.Errorf("task %s handled %d times, want once (handled %v)", id, handled[id], handled)
		}
	}
}

// TestWorkNackReason: a failing handler's task is nacked after its backoff with the error as
// a valid UTF-8 reason of at most 1 KiB; a panic is an error too.
func TestWorkNackReason(t *testing.T) {
	t.Parallel()
	f := &fakeTasks{queue: []*taskpickv1.LeasedTask{leased("long", 1), leased("panics", 2)}}
	c := serveFake(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			if _, _, nacks := f.snapshot(); len(nacks) == 2 {
				cancel()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	handler := func(_ context.Context, task *client.Task) error {
		if task.ID == "panics" {
			panic("boom")
		}
		return errors.New("bad \xff" + strings.Repeat("é", 2000))
	}
	backoff := func(attempt uint32) time.Duration { return time.Duration(attempt) * time.Minute }
	if err := c.Work(ctx, "p", handler, client.WithBackoff(backoff)); err != nil {
		t.Fatalf("Work = %v", err)
	}
	_, _, nacks := f.snapshot()
	for _, n := range nacks {
		if n.GetRetryAfter().AsDuration() != time.Minute {
			t.Errorf("nack of %s retries after %v, want the backoff of attempt 1 (1m)", n.GetId(), n.GetRetryAfter().AsDuration())
		}
		switch n.GetId() {
		case "long":
			if r := n.GetReason(); len(r) > 1024 || !strings.HasPrefix(r, "bad \uFFFD") {
				t.Errorf("reason of a long invalid error: %d bytes, starts %q", len(r), r[:10])
			}
		case "panics":
			if !strings.Contains(n.GetReason(), "panicked: boom") {
				t.Errorf("reason of a panic = %q", n.GetReason())
			}
		}
	}
}
