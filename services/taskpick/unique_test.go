package taskpick_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/services/taskpick"
)

// uniqueTask is a task with a unique key in scope.
func uniqueTask(id, key string, scope taskpickv1.UniqueScope) *taskpickv1.NewTask {
	nt := task(id)
	nt.UniqueKey, nt.UniqueScope = key, scope
	return nt
}

// timestamppbIn is the time d from now.
func timestamppbIn(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(time.Now().Add(d)) }

// putAll puts tasks and returns the answer whole.
func putAll(t *testing.T, in *instance, pool string, tasks ...*taskpickv1.NewTask) *taskpickv1.PutResponse {
	t.Helper()
	resp, err := in.client.Put(ctx, &taskpickv1.PutRequest{Pool: pool, Tasks: tasks})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if len(resp.GetCreated()) != len(tasks) || len(resp.GetDuplicate()) != len(tasks) ||
		len(resp.GetExistingId()) != len(tasks) || len(resp.GetExistingState()) != len(tasks) {
		t.Fatalf("Put of %d tasks answered %v", len(tasks), resp)
	}
	return resp
}

// wantCreated fails unless task i of resp was added.
func wantCreated(t *testing.T, resp *taskpickv1.PutResponse, i int) {
	t.Helper()
	if !resp.Created[i] || resp.Duplicate[i] || resp.ExistingId[i] != "" {
		t.Fatalf("task %d: created %v duplicate %v existing %q; want created", i, resp.Created[i], resp.Duplicate[i], resp.ExistingId[i])
	}
}

// wantDuplicate fails unless task i of resp is a duplicate of holder in state st.
func wantDuplicate(t *testing.T, resp *taskpickv1.PutResponse, i int, holder string, st taskpickv1.State) {
	t.Helper()
	if resp.Created[i] || !resp.Duplicate[i] || resp.ExistingId[i] != holder || resp.ExistingState[i] != st {
		t.Fatalf("task %d: created %v duplicate %v existing %q %v; want a duplicate of %q %v",
			i, resp.Created[i], resp.Duplicate[i], resp.ExistingId[i], resp.ExistingState[i], holder, st)
	}
}

// testUniqueActive: an active key is held while its task waits, is leased and is given back
// by a Nack, and only its Ack or death frees it; a duplicate inside one Put is one too.
func testUniqueActive(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "uactive")
	const active = taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE
	r := putAll(t, in, p, uniqueTask("a", "report", active), uniqueTask("b", "report", active), task("plain"))
	wantCreated(t, r, 0)
	wantDuplicate(t, r, 1, "a", taskpickv1.State_STATE_AVAILABLE)
	wantCreated(t, r, 2)
	// Again with the holder's own id: an idempotent Put, not a duplicate.
	if r := putAll(t, in, p, uniqueTask("a", "report", active)); r.Created[0] || r.Duplicate[0] {
		t.Fatalf("Put of the holder's own id again = %v, want neither created nor duplicate", r)
	}
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p, Order: taskpickv1.Order_ORDER_FIFO})
	if len(lt) != 1 || lt[0].GetId() != "a" {
		t.Fatalf("picked %v, want a", ids(lt))
	}
	wantDuplicate(t, putAll(t, in, p, uniqueTask("c", "report", taskpickv1.UniqueScope_UNIQUE_SCOPE_UNSPECIFIED)), 0, "a", taskpickv1.State_STATE_LEASED)
	if _, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "a", LeaseToken: lt[0].GetLeaseToken(), LeaseSecret: lt[0].GetLeaseSecret(), RetryAfter: sec(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	wantDuplicate(t, putAll(t, in, p, uniqueTask("c", "report", active)), 0, "a", taskpickv1.State_STATE_DELAYED)

	// Death frees the key: a task of one attempt that is nacked.
	dying := uniqueTask("d1", "nightly", active)
	dying.MaxAttempts = 1
	wantCreated(t, putAll(t, in, p, dying), 0)
	lt = pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 2, Order: taskpickv1.Order_ORDER_FIFO})
	if len(lt) != 2 || lt[1].GetId() != "d1" {
		t.Fatalf("picked %v, want plain and d1", ids(lt))
	}
	plain := lt[0]
	if r, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "d1", LeaseToken: lt[1].GetLeaseToken(), LeaseSecret: lt[1].GetLeaseSecret()}); err != nil || !r.GetDead() {
		t.Fatalf("Nack of the last attempt = %v, %v; want dead", r, err)
	}
	wantCreated(t, putAll(t, in, p, uniqueTask("d2", "nightly", active)), 0)

	// The Ack frees the key too.
	lt = pick(t, in, &taskpickv1.PickRequest{Pool: p})
	if len(lt) != 1 || lt[0].GetId() != "d2" {
		t.Fatalf("picked %v, want d2", ids(lt))
	}
	wantDuplicate(t, putAll(t, in, p, uniqueTask("e", "nightly", active)), 0, "d2", taskpickv1.State_STATE_LEASED)
	for _, x := range append(lt, plain) {
		if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: x.GetId(), LeaseToken: x.GetLeaseToken(), LeaseSecret: x.GetLeaseSecret()}); err != nil {
			t.Fatal(err)
		}
	}
	wantCreated(t, putAll(t, in, p, uniqueTask("e", "nightly", active)), 0)
}

// testUniqueQueued: a queued key is held until its task is first picked (or cancelled), so one
// more task may queue behind a running one, and no more.
func testUniqueQueued(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "uqueued")
	const queued = taskpickv1.UniqueScope_UNIQUE_SCOPE_QUEUED
	later := uniqueTask("a", "sync", queued)
	later.RunAt = timestamppbIn(time.Hour)
	wantCreated(t, putAll(t, in, p, later), 0)
	wantDuplicate(t, putAll(t, in, p, uniqueTask("b", "sync", queued)), 0, "a", taskpickv1.State_STATE_DELAYED)

	wantCreated(t, putAll(t, in, p, uniqueTask("c", "index", queued)), 0)
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p})
	if len(lt) != 1 || lt[0].GetId() != "c" {
		t.Fatalf("picked %v, want c", ids(lt))
	}
	r := putAll(t, in, p, uniqueTask("d", "index", queued), uniqueTask("e", "index", queued))
	wantCreated(t, r, 0)
	wantDuplicate(t, r, 1, "d", taskpickv1.State_STATE_AVAILABLE)
	// A Nack gives c back, but it was picked: d keeps the key.
	if _, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "c", LeaseToken: lt[0].GetLeaseToken(), LeaseSecret: lt[0].GetLeaseSecret()}); err != nil {
		t.Fatal(err)
	}
	wantDuplicate(t, putAll(t, in, p, uniqueTask("f", "index", queued)), 0, "d", taskpickv1.State_STATE_AVAILABLE)
	// CancelTask frees the key too.
	if _, err := in.client.CancelTask(ctx, &taskpickv1.CancelTaskRequest{Pool: p, Id: "d"}); err != nil {
		t.Fatal(err)
	}
	wantCreated(t, putAll(t, in, p, uniqueTask("f", "index", queued)), 0)
}

// testUniquePeriod: a period key is held from the Put for its period, even after its task
// was acked, and is free once the period passed.
func testUniquePeriod(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "uperiod")
	const period = 400 * time.Millisecond
	mk := func(id string) *taskpickv1.NewTask {
		nt := uniqueTask(id, "digest", taskpickv1.UniqueScope_UNIQUE_SCOPE_PERIOD)
		nt.UniquePeriod = sec(period)
		return nt
	}
	start := time.Now()
	wantCreated(t, putAll(t, in, p, mk("a")), 0)
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p})
	if len(lt) != 1 {
		t.Fatalf("picked %v, want a", ids(lt))
	}
	if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "a", LeaseToken: lt[0].GetLeaseToken(), LeaseSecret: lt[0].GetLeaseSecret()}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	r := putAll(t, in, p, mk("b"))
	for deadline := time.Now().Add(10 * time.Second); !r.Created[0]; {
		// Checked only when the Put surely fell inside the period: the machine may be slow.
		if time.Since(start) < period {
			wantDuplicate(t, r, 0, "a", taskpickv1.State_STATE_UNSPECIFIED)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key was still held 10s after a period of %v", period)
		}
		time.Sleep(50 * time.Millisecond)
		sent = time.Now()
		r = putAll(t, in, p, mk("b"))
	}
	if time.Since(start) < period {
		t.Fatalf("the key was free %v after the Put, before its period of %v", time.Since(start), period)
	}
	r = putAll(t, in, p, mk("c"))
	if time.Since(sent) < period {
		wantDuplicate(t, r, 0, "b", taskpickv1.State_STATE_AVAILABLE)
	}
}

// testUniqueConcurrent: 64 concurrent Puts of one key, each with an id of its own, through
// four instances over one store: exactly one task is added and every answer names it.
func testUniqueConcurrent(t *testing.T, b backendCase) {
	open, bus := b.store(t), embeddedBus(t)
	insts := make([]*instance, 4)
	for i := range insts {
		insts[i] = startInstance(t, b.name, open(t), bus)
	}
	p := pool(t, "u64")
	const n = 64
	holders := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			resp, err := insts[i%len(insts)].client.Put(ctx, &taskpickv1.PutRequest{Pool: p,
				Tasks: []*taskpickv1.NewTask{uniqueTask(fmt.Sprintf("t%02d", i), "one", taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE)}})
			switch {
			case err != nil:
				t.Errorf("Put %d: %v", i, err)
			case resp.GetCreated()[0]:
				holders[i] = fmt.Sprintf("t%02d", i)
			case resp.GetDuplicate()[0]:
				holders[i] = resp.GetExistingId()[0]
			default:
				t.Errorf("Put %d answered %v: neither created nor duplicate", i, resp)
			}
		})
	}
	close(start)
	wg.Wait()
	for i, h := range holders {
		if h != holders[0] || h == "" {
			t.Fatalf("Put %d names %q, Put 0 %q: want one task named by all", i, h, holders[0])
		}
	}
	if s := stats(t, insts[0], p); s.GetAvailable() != 1 {
		t.Fatalf("%d tasks available after 64 Puts of one key, want 1", s.GetAvailable())
	}
}

// testUniqueOverlapping: concurrent Puts of two tasks each, with two keys in opposite orders
// (the order PostgreSQL and MySQL deadlock on unless keys are locked in a fixed order), and
// a Batch of two Puts of one key: every key ends with exactly one task and no Put fails.
func testUniqueOverlapping(t *testing.T, b backendCase) {
	open, bus := b.store(t), embeddedBus(t)
	insts := []*instance{startInstance(t, b.name, open(t), bus), startInstance(t, b.name, open(t), bus)}
	p := pool(t, "uover")
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k1, k2 := "left", "right"
			if i%2 == 1 {
				k1, k2 = k2, k1
			}
			_, err := insts[i%2].client.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{
				uniqueTask(fmt.Sprintf("a%02d", i), k1, taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE),
				uniqueTask(fmt.Sprintf("b%02d", i), k2, taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE),
			}})
			if err != nil {
				t.Errorf("Put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if s := stats(t, insts[0], p); s.GetAvailable() != 2 {
		t.Fatalf("%d tasks available after Puts of two keys, want 2", s.GetAvailable())
	}
	batch, err := insts[0].client.Batch(ctx, &taskpickv1.BatchRequest{Operations: []*taskpickv1.BatchOperation{
		{Operation: &taskpickv1.BatchOperation_Put{Put: &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{uniqueTask("x", "batch", taskpickv1.UniqueScope_UNIQUE_SCOPE_QUEUED)}}}},
		{Operation: &taskpickv1.BatchOperation_Put{Put: &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{uniqueTask("y", "batch", taskpickv1.UniqueScope_UNIQUE_SCOPE_QUEUED)}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	x, y := batch.GetResults()[0].GetPut(), batch.GetResults()[1].GetPut()
	if x == nil || y == nil || x.Created[0] == y.Created[0] {
		t.Fatalf("a Batch of two Puts of one key answered %v: want one created, one duplicate", batch)
	}
	if x.Created[0] {
		wantDuplicate(t, y, 0, "x", taskpickv1.State_STATE_AVAILABLE)
	} else {
		wantDuplicate(t, x, 0, "y", taskpickv1.State_STATE_AVAILABLE)
	}
}

// TestUniqueAnswersStayWithinTheLimit: duplicates answer their holder's id, so a Batch of
// many small Puts of one key, whose holder has the longest id of the costliest characters in
// JSON, could answer far more than it was sent. Under the smallest answer limit the answer
// stays within it (the Puts that do not fit answer resource_exhausted, adding nothing), and a
// single Put whose answer could pass the limit is refused whole.
func TestUniqueAnswersStayWithinTheLimit(t *testing.T) {
	t.Parallel()
	limit := taskpick.MinAnswerBytes
	in := startInstance(t, "sqlite", sqliteStore(t)(t), nil, func(c *taskpick.Config) { c.MaxAnswerBytes = limit })
	p := pool(t, "ulimit")
	long := strings.Repeat("\x01", server.MaxKeyBytes) // 6 bytes each in JSON
	wantCreated(t, putAll(t, in, p, uniqueTask(long, "k", taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE)), 0)
	var ops []*taskpickv1.BatchOperation
	for i := range 300 {
		ops = append(ops, &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Put{Put: &taskpickv1.PutRequest{
			Pool: p, Tasks: []*taskpickv1.NewTask{uniqueTask(fmt.Sprint("d", i), "k", taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE)}}}})
	}
	resp, err := in.client.Batch(ctx, &taskpickv1.BatchRequest{Operations: ops})
	if err != nil {
		t.Fatal(err)
	}
	dups, full := 0, 0
	for i, r := range resp.GetResults() {
		switch {
		case r.GetError().GetCode() == connect.CodeResourceExhausted.String():
			full++
		case r.GetPut().GetDuplicate()[0] && r.GetPut().GetExistingId()[0] == long:
			dups++
		default:
			t.Fatalf("operation %d answered %v, want a duplicate of the holder or resource_exhausted", i, r)
		}
	}
	if n := answerSize(t, resp); n > limit || dups == 0 || full == 0 {
		t.Fatalf("the Batch answered %d bytes (limit %d), %d duplicates, %d refused: want within the limit, some of each", n, limit, dups, full)
	}
	if s := stats(t, in, p); s.GetAvailable() != 1 {
		t.Fatalf("%d tasks available, want the holder alone", s.GetAvailable())
	}
	// The SDK sends concurrent Puts as one Batch, and those that do not fit in its answer
	// again alone: every caller gets its duplicate, none an error.
	c := client.New(in.url, client.WithBatching(1))
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			r, err := c.Put(ctx, p, fmt.Sprint("s", i), nil, client.WithUniqueKey("k"))
			if err != nil || !r.Duplicate || r.ID != long {
				t.Errorf("SDK Put %d = %+v, %v; want a duplicate of the holder", i, r, err)
			}
		})
	}
	wg.Wait()
	var many []*taskpickv1.NewTask
	for i := range 200 {
		many = append(many, uniqueTask(fmt.Sprint("m", i), fmt.Sprint("k", i), taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE))
	}
	_, err = in.client.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: many})
	wantCode(t, err, connect.CodeInvalidArgument)
}

// TestSDKUniquePuts: 64 goroutines put one unique key through one SDK client, whose batching
// sends concurrent Puts together as Batch operations: one task is added, every answer names
// it, and the duplicates say so.
func TestSDKUniquePuts(t *testing.T) {
	t.Parallel()
	in := startInstance(t, "redis", redisStore(t)(t), nil)
	c := client.New(in.url)
	p := pool(t, "sdk")
	results := make([]client.PutResult, 64)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			var err error
			results[i], err = c.Put(ctx, p, fmt.Sprint("job", i), nil, client.WithUniqueKey("one"),
				client.WithUniquePeriod(time.Hour), client.WithPriority(3))
			if err != nil {
				t.Errorf("Put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	created := 0
	for i, r := range results {
		if r.ID != results[0].ID || r.Created == r.Duplicate {
			t.Fatalf("Put %d answered %+v, Put 0 %+v: want one task named by all, each created or a duplicate", i, r, results[0])
		}
		if r.Created {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d Puts created a task, want 1", created)
	}
}

// testUniqueCancelRequeue interleaves keys with CancelTask and Requeue: a cancel frees a
// queued or active key but not a period, not even for the cancelled task's own id; a dead task requeued after another task took its
// key does not take it back, and a cancel of that other task frees the key for a new one, not
// for the requeued task.
func testUniqueCancelRequeue(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "ucancel")
	const (
		active = taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE
		queued = taskpickv1.UniqueScope_UNIQUE_SCOPE_QUEUED
	)
	wantCreated(t, putAll(t, in, p, uniqueTask("a", "k", active)), 0)
	cancelTask(t, in, p, "a")
	wantCreated(t, putAll(t, in, p, uniqueTask("b", "k", active)), 0)
	wantDuplicate(t, putAll(t, in, p, uniqueTask("a", "k", active)), 0, "b", taskpickv1.State_STATE_AVAILABLE)

	per := uniqueTask("p1", "w", taskpickv1.UniqueScope_UNIQUE_SCOPE_PERIOD)
	per.UniquePeriod = sec(time.Hour)
	wantCreated(t, putAll(t, in, p, per), 0)
	cancelTask(t, in, p, "p1")
	per = uniqueTask("p2", "w", taskpickv1.UniqueScope_UNIQUE_SCOPE_PERIOD)
	per.UniquePeriod = sec(time.Hour)
	wantDuplicate(t, putAll(t, in, p, per), 0, "p1", taskpickv1.State_STATE_UNSPECIFIED)
	// The holder's own id again, once its task is gone, is a new task inside the period: a
	// duplicate too, not a second run.
	per.Id = "p1"
	wantDuplicate(t, putAll(t, in, p, per), 0, "p1", taskpickv1.State_STATE_UNSPECIFIED)

	x := uniqueTask("x", "q", queued)
	x.MaxAttempts = 1
	wantCreated(t, putAll(t, in, p, x), 0)
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p, Order: taskpickv1.Order_ORDER_FIFO, Count: 10})
	for _, l := range lt {
		if l.GetId() != "x" {
			continue
		}
		if r, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "x", LeaseToken: l.GetLeaseToken(), LeaseSecret: l.GetLeaseSecret()}); err != nil || !r.GetDead() {
			t.Fatalf("Nack of x: %v %v, want it dead", r, err)
		}
	}
	wantCreated(t, putAll(t, in, p, uniqueTask("y", "q", queued)), 0)
	if r, err := in.client.Requeue(ctx, &taskpickv1.RequeueRequest{Pool: p, Ids: []string{"x"}}); err != nil || !r.GetRequeued()[0] {
		t.Fatalf("Requeue x: %v %v", r, err)
	}
	wantDuplicate(t, putAll(t, in, p, uniqueTask("z", "q", queued)), 0, "y", taskpickv1.State_STATE_AVAILABLE)
	cancelTask(t, in, p, "y")
	wantCreated(t, putAll(t, in, p, uniqueTask("z", "q", queued)), 0)
	wantDuplicate(t, putAll(t, in, p, uniqueTask("x2", "q", queued)), 0, "z", taskpickv1.State_STATE_AVAILABLE)
}
