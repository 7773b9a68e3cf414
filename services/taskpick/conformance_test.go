package taskpick_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
)

// behaviours is the one conformance table: every behaviour runs on every backend.
var behaviours = []struct {
	name string
	run  func(t *testing.T, b backendCase)
}{
	{"PutIsIdempotent", testPutIdempotent},
	{"PickLeasesEachTaskOnce", testPickOnce},
	{"AckIsFenced", testAckFenced},
	{"ExpiredLeaseIsRecoveredAndStaleWorkerRefused", testRecovery},
	{"NackRetriesThenDeadThenRequeue", testNackDead},
	{"CrashesCountTowardsAttempts", testCrashDead},
	{"ExtendKeepsTheLease", testExtend},
	{"DelayedTasksWaitForRunAt", testDelay},
	{"Orders", testOrders},
	{"WaitingPickWakesOnPut", testWakeOnPut},
	{"TwoSweepersNeverDoubleRecover", testTwoSweepers},
	{"BadInputWritesNothing", testBadInput},
	{"ReputAfterAckStartsAboveOldTokens", testReputTokens},
	{"OneLeaseFinishedOnceUnderRacingCalls", testRacingFinishes},
	{"RivalWhoKnowsTheTokenCannotFinish", testRivalCannotFinish},
	{"HugeTokensAreWrongTokens", testHugeTokens},
	{"MultiTaskPickAnswersInPickOrder", testPickOrder},
	{"PickAndListDeadStayWithinTheAnswerLimit", testAnswerLimit},
	{"UniqueActiveHeldUntilAckOrDeath", testUniqueActive},
	{"UniqueQueuedFreedByPick", testUniqueQueued},
	{"UniquePeriodOutlivesItsTask", testUniquePeriod},
	{"UniqueExactUnder64ConcurrentPuts", testUniqueConcurrent},
	{"UniqueOverlappingBatchesNeitherRaceNorDeadlock", testUniqueOverlapping},
	{"UniqueAcrossCancelAndRequeue", testUniqueCancelRequeue},
	{"NackFollowsThePoolRetryPolicy", testRetryPolicy},
	{"PausedPoolWaitsAndResumeWakes", testPauseResume},
	{"NoPickAfterPauseAnswered", testPauseStopsPickers},
	{"CancelReadyDelayedNotLeased", testCancel},
	{"PoolSettingsSurviveRestart", testSettingsSurviveRestart},
	{"RacingSetPoolSettingsLeaveOneWhole", testConcurrentSettings},
	{"MaxLeasedExactAcrossInstances", testMaxLeasedExact},
	{"MaxLeasedWaitersWokenWhenAPlaceFrees", testMaxLeasedWakes},
	{"MaxLeasedZeroAndExpiredLeases", testMaxLeasedEdges},
	{"RateLimitSharedAcrossInstances", testRateLimit},
	{"Schedules", testSchedules},
}

func TestConformance(t *testing.T) {
	// The backends' rows run side by side: a row has its own store or pools and mostly waits
	// (leases, run_at, sweeps, waiting picks), and the whole table one row at a time was most
	// of the package's CI time. The MySQL rows also run side by side with each other: they
	// share the dev database's table, so a pick in one row locks index entries of another
	// row's pool (see sqltask's takeSkipped), which a pick there must not mistake for an
	// empty pool. The PostgreSQL rows run side by side too, each in a schema of its own. The
	// other backends' rows stay one at a time, as before.
	var backendsDone sync.WaitGroup
	for _, b := range backends {
		backendsDone.Go(func() {
			t.Run(b.name, func(t *testing.T) {
				for _, c := range behaviours {
					t.Run(c.name, func(t *testing.T) {
						if b.name == "mysql" || b.name == "postgres" {
							t.Parallel()
						}
						c.run(t, b)
					})
				}
			})
		})
	}
	backendsDone.Wait()
}

// one starts one instance with events on a fresh store.
func one(t *testing.T, b backendCase) *instance {
	return startInstance(t, b.name, b.store(t)(t), embeddedBus(t))
}

var ctx = context.Background()

func put(t *testing.T, in *instance, pool string, tasks ...*taskpickv1.NewTask) []bool {
	t.Helper()
	resp, err := in.client.Put(ctx, &taskpickv1.PutRequest{Pool: pool, Tasks: tasks})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	return resp.GetCreated()
}

func task(id string) *taskpickv1.NewTask {
	return &taskpickv1.NewTask{Id: id, Payload: []byte("payload of " + id)}
}

func pick(t *testing.T, in *instance, req *taskpickv1.PickRequest) []*taskpickv1.LeasedTask {
	t.Helper()
	resp, err := in.client.Pick(ctx, req)
	if err != nil {
		t.Fatalf("Pick: %v", err)
	}
	return resp.GetTasks()
}

func ids(ts []*taskpickv1.LeasedTask) []string {
	out := make([]string, len(ts))
	for i, x := range ts {
		out[i] = x.GetId()
	}
	return out
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("error %v, want %v", err, code)
	}
}

func stats(t *testing.T, in *instance, pool string) *taskpickv1.StatsResponse {
	t.Helper()
	s, err := in.client.Stats(ctx, &taskpickv1.StatsRequest{Pool: pool})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return s
}

func get(t *testing.T, in *instance, pool, id string) *taskpickv1.Task {
	t.Helper()
	r, err := in.client.Get(ctx, &taskpickv1.GetRequest{Pool: pool, Id: id})
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return r.GetTask()
}

func sec(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func testPutIdempotent(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "idem")
	if got := put(t, in, p, task("a"), task("b")); !slices.Equal(got, []bool{true, true}) {
		t.Fatalf("first Put created %v", got)
	}
	if got := put(t, in, p, &taskpickv1.NewTask{Id: "b", Payload: []byte("other")}, task("c")); !slices.Equal(got, []bool{false, true}) {
		t.Fatalf("second Put created %v, want [false true]", got)
	}
	if g := get(t, in, p, "b"); string(g.GetPayload()) != "payload of b" || g.GetState() != taskpickv1.State_STATE_AVAILABLE {
		t.Fatalf("b after a repeated Put: %v", g)
	}
	// A leased task is not reset by a Put of its id either.
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 3})
	if len(lt) != 3 {
		t.Fatalf("picked %d", len(lt))
	}
	if got := put(t, in, p, task("a")); got[0] {
		t.Fatal("Put of a leased id created it again")
	}
	if s := stats(t, in, p); s.GetLeased() != 3 || s.GetAvailable() != 0 {
		t.Fatalf("stats %v", s)
	}
}

func testPickOnce(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "once")
	for i := range 5 {
		put(t, in, p, task(fmt.Sprint("t", i)))
	}
	first := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 3})
	second := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 3})
	third := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 3})
	all := append(ids(first), ids(second)...)
	slices.Sort(all)
	if len(first) != 3 || len(second) != 2 || len(third) != 0 || len(slices.Compact(all)) != 5 {
		t.Fatalf("picks %v %v %v", ids(first), ids(second), ids(third))
	}
	for _, lt := range append(first, second...) {
		if lt.GetLeaseToken() == 0 || lt.GetAttempt() != 1 || lt.GetMaxAttempts() != taskpick.DefaultMaxAttempts ||
			!strings.HasPrefix(string(lt.GetPayload()), "payload of") || lt.GetExpiresAt() == nil {
			t.Fatalf("leased task %v", lt)
		}
	}
	if s := stats(t, in, p); s.GetLeased() != 5 || s.GetAvailable() != 0 {
		t.Fatalf("stats %v", s)
	}
}

func testAckFenced(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "ack")
	put(t, in, p, task("x"))
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p})[0]
	for _, tok := range []uint64{lt.GetLeaseToken() + 1, lt.GetLeaseToken() - 1} {
		_, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "x", LeaseToken: tok, LeaseSecret: lt.GetLeaseSecret()})
		wantCode(t, err, connect.CodeFailedPrecondition)
		_, err = in.client.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "x", LeaseToken: tok, LeaseSecret: lt.GetLeaseSecret()})
		wantCode(t, err, connect.CodeFailedPrecondition)
		_, err = in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "x", LeaseToken: tok, LeaseSecret: lt.GetLeaseSecret()})
		wantCode(t, err, connect.CodeFailedPrecondition)
	}
	if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "x", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()}); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	_, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "x", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()})
	wantCode(t, err, connect.CodeNotFound)
	_, err = in.client.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "x"})
	wantCode(t, err, connect.CodeNotFound)
	if s := stats(t, in, p); s.GetLeased()+s.GetAvailable()+s.GetDone() != 0 {
		t.Fatalf("an acked task left %v", s)
	}
}

// waitFor polls cond until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func testRecovery(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "recover")
	put(t, in, p, task("x"))
	old := pick(t, in, &taskpickv1.PickRequest{Pool: p, Ttl: sec(time.Second)})[0]
	end := old.GetExpiresAt().AsTime()
	// Before the lease's end nobody else gets the task.
	if got := pick(t, in, &taskpickv1.PickRequest{Pool: p}); len(got) != 0 {
		t.Fatalf("picked a leased task: %v", ids(got))
	}
	var again []*taskpickv1.LeasedTask
	waitFor(t, 10*time.Second, "recovery", func() bool {
		again = pick(t, in, &taskpickv1.PickRequest{Pool: p})
		return len(again) == 1
	})
	late := time.Since(end)
	if time.Now().Before(end) {
		t.Fatalf("task picked again before its first lease's reported end %v", end)
	}
	t.Logf("recovered and picked again %v after the lease's end", late)
	nw := again[0]
	if nw.GetLeaseToken() <= old.GetLeaseToken() || nw.GetAttempt() != 2 {
		t.Fatalf("redelivery token %d attempt %d after token %d", nw.GetLeaseToken(), nw.GetAttempt(), old.GetLeaseToken())
	}
	if g := get(t, in, p, "x"); g.GetRecoveries() != 1 || g.GetFailures() != 0 || g.GetState() != taskpickv1.State_STATE_LEASED {
		t.Fatalf("task after recovery: %v", g)
	}
	_, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "x", LeaseToken: old.GetLeaseToken(), LeaseSecret: old.GetLeaseSecret()})
	wantCode(t, err, connect.CodeFailedPrecondition)
	_, err = in.client.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "x", LeaseToken: old.GetLeaseToken(), LeaseSecret: old.GetLeaseSecret()})
	wantCode(t, err, connect.CodeFailedPrecondition)
	if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "x", LeaseToken: nw.GetLeaseToken(), LeaseSecret: nw.GetLeaseSecret()}); err != nil {
		t.Fatalf("Ack of the new lease: %v", err)
	}
}

func testNackDead(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "nack")
	put(t, in, p, &taskpickv1.NewTask{Id: "poison", MaxAttempts: 2})
	for attempt := uint32(1); attempt <= 2; attempt++ {
		got := pick(t, in, &taskpickv1.PickRequest{Pool: p})
		if len(got) != 1 || got[0].GetAttempt() != attempt {
			t.Fatalf("attempt %d: picked %v", attempt, got)
		}
		r, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "poison", LeaseToken: got[0].GetLeaseToken(), LeaseSecret: got[0].GetLeaseSecret(), Reason: fmt.Sprint("boom\x00 ", attempt)}) // NUL is valid UTF-8, and kept
		if err != nil {
			t.Fatalf("Nack: %v", err)
		}
		if r.GetDead() != (attempt == 2) {
			t.Fatalf("attempt %d: dead = %v", attempt, r.GetDead())
		}
	}
	if got := pick(t, in, &taskpickv1.PickRequest{Pool: p}); len(got) != 0 {
		t.Fatal("picked a dead task")
	}
	dead, err := in.client.ListDead(ctx, &taskpickv1.ListDeadRequest{Pool: p})
	if err != nil {
		t.Fatalf("ListDead: %v", err)
	}
	if dead.GetTotal() != 1 || len(dead.GetTasks()) != 1 || dead.GetTasks()[0].GetLastError() != "boom\x00 2" ||
		dead.GetTasks()[0].GetFailures() != 2 || dead.GetTasks()[0].GetState() != taskpickv1.State_STATE_DEAD {
		t.Fatalf("dead list %v", dead)
	}
	if s := stats(t, in, p); s.GetDead() != 1 || s.GetAvailable() != 0 {
		t.Fatalf("stats %v", s)
	}
	rq, err := in.client.Requeue(ctx, &taskpickv1.RequeueRequest{Pool: p, Ids: []string{"poison", "missing"}})
	if err != nil || !slices.Equal(rq.GetRequeued(), []bool{true, false}) {
		t.Fatalf("Requeue: %v %v", rq, err)
	}
	got := pick(t, in, &taskpickv1.PickRequest{Pool: p})
	if len(got) != 1 || got[0].GetAttempt() != 1 {
		t.Fatalf("after Requeue picked %v", got)
	}
	// A Nack with retry_after makes it delayed, not available.
	if _, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "poison", LeaseToken: got[0].GetLeaseToken(), LeaseSecret: got[0].GetLeaseSecret(), RetryAfter: sec(time.Hour)}); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	if s := stats(t, in, p); s.GetDelayed() != 1 || s.GetAvailable() != 0 {
		t.Fatalf("stats after a delayed Nack %v", s)
	}
}

func testCrashDead(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "crash")
	put(t, in, p, &taskpickv1.NewTask{Id: "kills-workers", MaxAttempts: 1})
	pick(t, in, &taskpickv1.PickRequest{Pool: p, Ttl: sec(time.Second)})
	waitFor(t, 10*time.Second, "death by expiry", func() bool { return stats(t, in, p).GetDead() == 1 })
	g := get(t, in, p, "kills-workers")
	if g.GetRecoveries() != 1 || g.GetFailures() != 0 || g.GetLastError() == "" {
		t.Fatalf("task dead by expiry: %v", g)
	}
}

func testExtend(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "extend")
	put(t, in, p, task("x"))
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p, Ttl: sec(time.Second)})[0]
	r, err := in.client.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "x", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret(), Ttl: sec(4 * time.Second)})
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if !r.GetExpiresAt().AsTime().After(lt.GetExpiresAt().AsTime()) {
		t.Fatal("Extend did not move the lease's end")
	}
	time.Sleep(1500 * time.Millisecond) // past the first ttl, well within the extension
	if got := pick(t, in, &taskpickv1.PickRequest{Pool: p}); len(got) != 0 {
		t.Fatal("an extended lease was recovered")
	}
	if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "x", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()}); err != nil {
		t.Fatalf("Ack after Extend: %v", err)
	}
}

func testDelay(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "delay")
	runAt := time.Now().Add(700 * time.Millisecond)
	put(t, in, p, &taskpickv1.NewTask{Id: "later", RunAt: timestamppb.New(runAt)})
	if got := pick(t, in, &taskpickv1.PickRequest{Pool: p}); len(got) != 0 {
		t.Fatal("picked a task before its run_at")
	}
	if s := stats(t, in, p); s.GetDelayed() != 1 || s.GetAvailable() != 0 {
		t.Fatalf("stats %v", s)
	}
	if g := get(t, in, p, "later"); g.GetState() != taskpickv1.State_STATE_DELAYED {
		t.Fatalf("state %v", g.GetState())
	}
	got := pick(t, in, &taskpickv1.PickRequest{Pool: p, Wait: sec(10 * time.Second)})
	if len(got) != 1 {
		t.Fatal("a waiting Pick did not get the delayed task")
	}
	if time.Now().Before(runAt) {
		t.Fatal("delayed task picked before its run_at")
	}
	t.Logf("delayed task picked %v after its run_at", time.Since(runAt))
}

func testOrders(t *testing.T, b backendCase) {
	in := one(t, b)
	pf, pp := pool(t, "fifo"), pool(t, "prio")
	for i, prio := range []int32{1, 5, 3, 5} {
		put(t, in, pf, task(fmt.Sprint("f", i)))
		put(t, in, pp, &taskpickv1.NewTask{Id: fmt.Sprint("p", i), Priority: prio})
		time.Sleep(2 * time.Millisecond) // distinct availability times
	}
	var fifo, prio []string
	for range 4 {
		fifo = append(fifo, ids(pick(t, in, &taskpickv1.PickRequest{Pool: pf, Order: taskpickv1.Order_ORDER_FIFO}))...)
		prio = append(prio, ids(pick(t, in, &taskpickv1.PickRequest{Pool: pp, Order: taskpickv1.Order_ORDER_PRIORITY}))...)
	}
	if !slices.Equal(fifo, []string{"f0", "f1", "f2", "f3"}) {
		t.Errorf("FIFO order %v", fifo)
	}
	if !slices.Equal(prio, []string{"p1", "p3", "p2", "p0"}) {
		t.Errorf("PRIORITY order %v, want p1 p3 p2 p0", prio)
	}
	// RANDOM: every task can come first, and a batch is distinct tasks.
	pr := pool(t, "random")
	var batch []*taskpickv1.NewTask
	for i := range 10 {
		batch = append(batch, task(fmt.Sprint("r", i)))
	}
	put(t, in, pr, batch...)
	firsts := map[string]bool{}
	for range 40 {
		got := pick(t, in, &taskpickv1.PickRequest{Pool: pr, Order: taskpickv1.Order_ORDER_RANDOM})
		firsts[got[0].GetId()] = true
		if _, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: pr, Id: got[0].GetId(), LeaseToken: got[0].GetLeaseToken(), LeaseSecret: got[0].GetLeaseSecret()}); err != nil {
			t.Fatal(err)
		}
	}
	if len(firsts) < 4 {
		t.Errorf("40 random picks of 10 tasks drew only %v", firsts)
	}
	all := ids(pick(t, in, &taskpickv1.PickRequest{Pool: pr, Count: 10, Order: taskpickv1.Order_ORDER_RANDOM}))
	slices.Sort(all)
	if len(slices.Compact(all)) != 10 {
		t.Errorf("a random batch of 10 of 10: %v", all)
	}
}

func testWakeOnPut(t *testing.T, b backendCase) {
	// Recheck is an hour: only the event can end the wait in time.
	in := startInstance(t, b.name, b.store(t)(t), embeddedBus(t), func(c *taskpick.Config) { c.Recheck = time.Hour })
	p := pool(t, "wake")
	type res struct {
		got []*taskpickv1.LeasedTask
		at  time.Time
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Wait: sec(time.Minute)})
		done <- res{r.GetTasks(), time.Now(), err}
	}()
	time.Sleep(300 * time.Millisecond) // the Pick is waiting
	putAt := time.Now()
	put(t, in, p, task("wake"))
	select {
	case r := <-done:
		if r.err != nil || len(r.got) != 1 {
			t.Fatalf("waiting Pick: %v %v", r.got, r.err)
		}
		t.Logf("waiting Pick woke %v after the Put", r.at.Sub(putAt))
	case <-time.After(30 * time.Second):
		t.Fatal("a waiting Pick was not woken by a Put")
	}
}

func testTwoSweepers(t *testing.T, b backendCase) {
	open := b.store(t)
	bus := embeddedBus(t)
	in1, in2 := startInstance(t, b.name, open(t), bus), startInstance(t, b.name, open(t), bus)
	p := pool(t, "sweepers")
	const n = 200
	var batch []*taskpickv1.NewTask
	for i := range n {
		batch = append(batch, task(fmt.Sprint("s", i)))
	}
	put(t, in1, p, batch...)
	if got := pick(t, in1, &taskpickv1.PickRequest{Pool: p, Count: 100, Ttl: sec(time.Second)}); len(got) != 100 {
		t.Fatalf("picked %d", len(got))
	}
	if got := pick(t, in2, &taskpickv1.PickRequest{Pool: p, Count: 100, Ttl: sec(time.Second)}); len(got) != 100 {
		t.Fatalf("picked %d", len(got))
	}
	waitFor(t, 15*time.Second, "recovery of 200 leases", func() bool { return stats(t, in1, p).GetAvailable() == n })
	time.Sleep(3 * testSweep) // any double recovery would have happened by now
	for i := range n {
		if g := get(t, in2, p, fmt.Sprint("s", i)); g.GetRecoveries() != 1 || g.GetState() != taskpickv1.State_STATE_AVAILABLE {
			t.Fatalf("task s%d after two sweepers: %v", i, g)
		}
	}
}

func testBadInput(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "bad")
	long := strings.Repeat("k", 513)
	cases := []struct {
		field string
		call  func() error
	}{
		{"pool", func() error {
			_, err := in.client.Put(ctx, &taskpickv1.PutRequest{Pool: "", Tasks: []*taskpickv1.NewTask{task("a")}})
			return err
		}},
		{"pool", func() error { _, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: long}); return err }},
		{"tasks", func() error { _, err := in.client.Put(ctx, &taskpickv1.PutRequest{Pool: p}); return err }},
		{"tasks[1].id", func() error {
			_, err := in.client.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{task("ok"), task("")}})
			return err
		}},
		{"tasks[1].id", func() error {
			_, err := in.client.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{task("ok"), task("ok")}})
			return err
		}},
		{"tasks[0].payload", func() error {
			_, err := in.client.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{{Id: "big", Payload: make([]byte, taskpick.MaxPayloadBytes+1)}}})
			return err
		}},
		{"tasks[0].max_attempts", func() error {
			_, err := in.client.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{{Id: "m", MaxAttempts: 1001}}})
			return err
		}},
		{"count", func() error { _, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Count: 101}); return err }},
		{"ttl", func() error {
			_, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Ttl: sec(999 * time.Millisecond)})
			return err
		}},
		{"ttl", func() error {
			_, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Ttl: sec(13 * time.Hour)})
			return err
		}},
		{"order", func() error { _, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Order: 42}); return err }},
		{"wait", func() error {
			_, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Wait: sec(-time.Second)})
			return err
		}},
		{"lease_token", func() error { _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "a"}); return err }},
		{"lease_secret", func() error {
			_, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "a", LeaseToken: 1})
			return err
		}},
		{"lease_secret", func() error {
			_, err := in.client.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "a", LeaseToken: 1, LeaseSecret: strings.Repeat("s", taskpick.MaxLeaseSecretBytes+1)})
			return err
		}},
		{"id", func() error {
			_, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "a\x00b", LeaseToken: 1})
			return err
		}},
		{"retry_after", func() error {
			_, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "a", LeaseToken: 1, LeaseSecret: "s", RetryAfter: sec(31 * 24 * time.Hour)})
			return err
		}},
		{"ids", func() error { _, err := in.client.Requeue(ctx, &taskpickv1.RequeueRequest{Pool: p}); return err }},
		{"limit", func() error {
			_, err := in.client.ListDead(ctx, &taskpickv1.ListDeadRequest{Pool: p, Limit: 1001})
			return err
		}},
		{"backend", func() error {
			_, err := in.client.Stats(ctx, &taskpickv1.StatsRequest{Backend: "nope", Pool: p})
			return err
		}},
	}
	for _, c := range cases {
		testenv.WantInvalidField(t, c.call(), c.field)
	}
	if s := stats(t, in, p); s.GetAvailable()+s.GetDelayed() != 0 {
		t.Fatalf("a refused batch wrote tasks: %v", s)
	}
	// An over-long reason is cut, not refused.
	put(t, in, p, &taskpickv1.NewTask{Id: "r", MaxAttempts: 1})
	lt := pick(t, in, &taskpickv1.PickRequest{Pool: p})[0]
	if _, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "r", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret(), Reason: strings.Repeat("é", 2000)}); err != nil {
		t.Fatalf("Nack with a long reason: %v", err)
	}
	if e := get(t, in, p, "r").GetLastError(); len(e) > taskpick.MaxReasonBytes || len(e) < taskpick.MaxReasonBytes-1 {
		t.Fatalf("reason kept as %d bytes", len(e))
	}
}

func testReputTokens(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "reput")
	var last uint64
	for range 5 {
		put(t, in, p, task("same"))
		lt := pick(t, in, &taskpickv1.PickRequest{Pool: p})[0]
		if lt.GetLeaseToken() <= last {
			t.Fatalf("token %d after %d of an earlier life of the id", lt.GetLeaseToken(), last)
		}
		last = lt.GetLeaseToken()
		if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "same", LeaseToken: last, LeaseSecret: lt.GetLeaseSecret()}); err != nil {
			t.Fatal(err)
		}
		// The guarantee is for a life begun in an earlier millisecond (see taskpick.TokenScale).
		time.Sleep(2 * time.Millisecond)
	}
}

// testRacingFinishes races 16 goroutines that hold the same token, half acking and half
// nacking each task, while a rival keeps picking: exactly one finish per lease succeeds, and
// the rival never gets a task before it was given back.
func testRacingFinishes(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "race")
	for round := range 20 {
		id := fmt.Sprint("r", round)
		put(t, in, p, &taskpickv1.NewTask{Id: id, MaxAttempts: 1000})
		lt := pick(t, in, &taskpickv1.PickRequest{Pool: p})[0]
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok, nacked := 0, false
		for g := range 16 {
			wg.Go(func() {
				var err error
				if g%2 == 0 {
					_, err = in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: id, LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()})
				} else {
					_, err = in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: id, LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret(), RetryAfter: sec(time.Hour)})
				}
				mu.Lock()
				defer mu.Unlock()
				switch c := connect.CodeOf(err); {
				case err == nil:
					ok++
					nacked = g%2 == 1
				case c != connect.CodeFailedPrecondition && c != connect.CodeNotFound:
					t.Errorf("racing finish: %v", err)
				}
			})
		}
		if got := pick(t, in, &taskpickv1.PickRequest{Pool: p}); len(got) != 0 {
			t.Fatalf("a rival picked %v while its lease was live or delayed", ids(got))
		}
		wg.Wait()
		if ok != 1 {
			t.Fatalf("round %d: %d finishes of one lease succeeded", round, ok)
		}
		_, err := in.client.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: id})
		if nacked != (err == nil) {
			t.Fatalf("round %d: nacked=%v but Get says %v", round, nacked, err)
		}
	}
}
