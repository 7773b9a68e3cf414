package taskpick_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/services/taskpick"
)

// Pool settings: retry policies, pausing and cancelling, on every backend (rows of the
// conformance table).

func setSettings(t *testing.T, in *instance, pool string, s *taskpickv1.PoolSettings) *taskpickv1.PoolSettings {
	t.Helper()
	r, err := in.client.SetPoolSettings(ctx, &taskpickv1.SetPoolSettingsRequest{Pool: pool, Settings: s})
	if err != nil {
		t.Fatalf("SetPoolSettings: %v", err)
	}
	return r.GetSettings()
}

func getSettings(t *testing.T, in *instance, pool string) *taskpickv1.GetPoolSettingsResponse {
	t.Helper()
	r, err := in.client.GetPoolSettings(ctx, &taskpickv1.GetPoolSettingsRequest{Pool: pool})
	if err != nil {
		t.Fatalf("GetPoolSettings: %v", err)
	}
	return r
}

func pause(t *testing.T, in *instance, pool string, paused bool) {
	t.Helper()
	var err error
	if paused {
		_, err = in.client.PausePool(ctx, &taskpickv1.PausePoolRequest{Pool: pool})
	} else {
		_, err = in.client.ResumePool(ctx, &taskpickv1.ResumePoolRequest{Pool: pool})
	}
	if err != nil {
		t.Fatalf("pause %v: %v", paused, err)
	}
}

// nackAt picks id (the only available task of the pool) and nacks it: with retry_after when
// retry is not nil, else by the pool's policy. It returns the window in which the backend
// computed the task's due time, and whether it died.
func nackAt(t *testing.T, in *instance, pool, id string, retry *time.Duration) (before, after time.Time, dead bool) {
	t.Helper()
	got := pick(t, in, &taskpickv1.PickRequest{Pool: pool})
	if len(got) != 1 || got[0].GetId() != id {
		t.Fatalf("Pick: %v, want %s", ids(got), id)
	}
	req := &taskpickv1.NackRequest{Pool: pool, Id: id, LeaseToken: got[0].GetLeaseToken(), LeaseSecret: got[0].GetLeaseSecret()}
	if retry != nil {
		req.RetryAfter = sec(*retry)
	}
	before = time.Now()
	r, err := in.client.Nack(ctx, req)
	if err != nil {
		t.Fatalf("Nack: %v", err)
	}
	return before, time.Now(), r.GetDead()
}

// wantDue checks that task id is delayed until within [lo, hi] after the Nack's window.
func wantDue(t *testing.T, in *instance, pool, id string, before, after time.Time, lo, hi time.Duration) {
	t.Helper()
	const slack = 50 * time.Millisecond // whole milliseconds, and the database's clock
	task := get(t, in, pool, id)
	at := task.GetRunAt().AsTime()
	if task.GetState() != taskpickv1.State_STATE_DELAYED || at.Before(before.Add(lo-slack)) || at.After(after.Add(hi+slack)) {
		t.Fatalf("%s after the Nack: %v due %v after it, want delayed by %v to %v", id, task.GetState(), at.Sub(before), lo, hi)
	}
}

func testRetryPolicy(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "policy")
	zero := time.Duration(0)
	// Without settings a Nack without retry_after gives the task back at once, as before.
	put(t, in, p, task("plain"))
	if _, _, dead := nackAt(t, in, p, "plain", nil); dead || get(t, in, p, "plain").GetState() != taskpickv1.State_STATE_AVAILABLE {
		t.Fatalf("no policy: %v, want available at once", get(t, in, p, "plain").GetState())
	}
	cancelTask(t, in, p, "plain")

	three := uint32(3)
	stored := setSettings(t, in, p, &taskpickv1.PoolSettings{MaxAttempts: &three, Retry: &taskpickv1.RetryPolicy{
		Initial: sec(10 * time.Second), Multiplier: 3, Max: sec(60 * time.Second)}})
	if stored.GetRetry().GetInitial().AsDuration() != 10*time.Second || stored.GetMaxAttempts() != 3 || stored.GetPaused() {
		t.Fatalf("SetPoolSettings answered %v", stored)
	}
	// Attempt 1: initial. Attempt 2 (after an explicit 0, which keeps its own delay): ×3.
	// Attempt 3: 90s, capped at 60s.
	for attempt, want := range map[int]time.Duration{1: 10 * time.Second, 2: 30 * time.Second, 3: 60 * time.Second} {
		id := fmt.Sprintf("a%d", attempt)
		put(t, in, p, &taskpickv1.NewTask{Id: id, MaxAttempts: 10})
		for range attempt - 1 {
			nackAt(t, in, p, id, &zero)
			if s := get(t, in, p, id).GetState(); s != taskpickv1.State_STATE_AVAILABLE {
				t.Fatalf("retry_after 0 under a policy left %s %v, want available at once", id, s)
			}
		}
		before, after, dead := nackAt(t, in, p, id, nil)
		if dead {
			t.Fatalf("%s died on attempt %d of 3", id, attempt)
		}
		wantDue(t, in, p, id, before, after, want, want)
		cancelTask(t, in, p, id) // out of the way of the next Pick
	}
	// The pool's max_attempts applies to tasks put without one: the third failure is death.
	put(t, in, p, task("dies"))
	if m := get(t, in, p, "dies").GetMaxAttempts(); m != 3 {
		t.Fatalf("max_attempts of a task put without one: %d, want the pool's 3", m)
	}
	nackAt(t, in, p, "dies", &zero)
	nackAt(t, in, p, "dies", &zero)
	if _, _, dead := nackAt(t, in, p, "dies", nil); !dead || get(t, in, p, "dies").GetState() != taskpickv1.State_STATE_DEAD {
		t.Fatal("the third failure of a task with the pool's 3 attempts did not kill it")
	}
	// An explicit retry_after keeps its own delay under a policy.
	put(t, in, p, task("own"))
	own := 7 * time.Second
	before, after, _ := nackAt(t, in, p, "own", &own)
	wantDue(t, in, p, "own", before, after, own, own)
	cancelTask(t, in, p, "own")

	// Full jitter: every delay within [0, d], and not all the same (4 draws of whole
	// milliseconds in 20s: all equal once in about 10^13).
	setSettings(t, in, p, &taskpickv1.PoolSettings{Retry: &taskpickv1.RetryPolicy{Initial: sec(20 * time.Second), Max: sec(20 * time.Second), Jitter: 1}})
	seen := map[time.Duration]bool{}
	for i := range 4 {
		id := fmt.Sprintf("j%d", i)
		put(t, in, p, task(id))
		before, after, _ := nackAt(t, in, p, id, nil)
		wantDue(t, in, p, id, before, after, 0, 20*time.Second)
		seen[get(t, in, p, id).GetRunAt().AsTime().Sub(before).Round(100*time.Millisecond)] = true
		cancelTask(t, in, p, id)
	}
	if len(seen) < 2 {
		t.Fatalf("four jittered delays were all %v", seen)
	}
}

func cancelTask(t *testing.T, in *instance, pool, id string) {
	t.Helper()
	if _, err := in.client.CancelTask(ctx, &taskpickv1.CancelTaskRequest{Pool: pool, Id: id}); err != nil {
		t.Fatalf("CancelTask %s: %v", id, err)
	}
}

// countingBackend counts the picks a backend is asked for: the real backend does the work.
type countingBackend struct {
	taskpick.Backend
	picks atomic.Int64
}

func (c *countingBackend) Pick(ctx context.Context, pool string, spec taskpick.PickSpec) (taskpick.Picked, error) {
	c.picks.Add(1)
	return c.Backend.Pick(ctx, pool, spec)
}

func testPauseResume(t *testing.T, b backendCase) {
	cb := &countingBackend{Backend: b.store(t)(t)}
	// Recheck is an hour: only ResumePool's announcement can end the wait in time.
	in := startInstance(t, b.name, cb, embeddedBus(t), func(c *taskpick.Config) { c.Recheck = time.Hour })
	p := pool(t, "pause")
	put(t, in, p, task("a"), task("b"))
	pause(t, in, p, true)
	pause(t, in, p, true) // twice is no error
	if got := pick(t, in, &taskpickv1.PickRequest{Pool: p}); len(got) != 0 {
		t.Fatalf("Pick of a paused pool leased %v", ids(got))
	}
	if s := stats(t, in, p); !s.GetPaused() || s.GetAvailable() != 2 {
		t.Fatalf("Stats of a paused pool: %v", s)
	}
	if !getSettings(t, in, p).GetSettings().GetPaused() {
		t.Fatal("GetPoolSettings does not say paused")
	}
	done := make(chan []*taskpickv1.LeasedTask, 1)
	before := cb.picks.Load()
	go func() {
		r, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Wait: sec(time.Minute)})
		if err != nil {
			t.Errorf("waiting Pick: %v", err)
		}
		done <- r.GetTasks()
	}()
	time.Sleep(500 * time.Millisecond) // the Pick waits on the paused pool
	// Allowed: the first try, and a wake-up by the Put's event arriving late.
	if n := cb.picks.Load() - before; n > 3 {
		t.Fatalf("a Pick waiting on a paused pool tried %d times in 500ms: it must wait, not spin", n)
	}
	select {
	case got := <-done:
		t.Fatalf("a waiting Pick of a paused pool answered %v", ids(got))
	default:
	}
	resumed := time.Now()
	pause(t, in, p, false)
	select {
	case got := <-done:
		if len(got) != 1 {
			t.Fatalf("woken Pick leased %v, want one task", ids(got))
		}
		t.Logf("waiting Pick woke %v after ResumePool", time.Since(resumed))
	case <-time.After(20 * time.Second):
		t.Fatal("ResumePool did not wake a waiting Pick")
	}
	if s := stats(t, in, p); s.GetPaused() || s.GetLeased() != 1 {
		t.Fatalf("Stats after resume: %v", s)
	}
}

// testPauseStopsPickers: 16 workers pick while the pool is paused; no Pick sent after
// PausePool answered leases a task.
func testPauseStopsPickers(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "pause16")
	var tasks []*taskpickv1.NewTask
	for i := range 100 {
		tasks = append(tasks, task(fmt.Sprintf("t%03d", i)))
	}
	put(t, in, p, tasks...)
	var picked atomic.Int64
	var pausedAt atomic.Pointer[time.Time]
	var late atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent := time.Now()
				r, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p})
				if err != nil {
					t.Errorf("Pick: %v", err)
					return
				}
				if len(r.GetTasks()) > 0 {
					picked.Add(1)
					if at := pausedAt.Load(); at != nil && sent.After(*at) {
						late.Add(1)
					}
				}
			}
		})
	}
	waitFor(t, 30*time.Second, "16 workers picking", func() bool { return picked.Load() >= 8 })
	pause(t, in, p, true)
	now := time.Now()
	pausedAt.Store(&now)
	time.Sleep(100 * time.Millisecond) // every worker sends Picks after the pause
	close(stop)
	wg.Wait()
	if n := late.Load(); n > 0 {
		t.Fatalf("%d Picks sent after PausePool answered leased tasks", n)
	}
	if s := stats(t, in, p); s.GetAvailable() == 0 {
		t.Fatal("the workers emptied the pool before the pause: the test proved nothing")
	}
}

func testCancel(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "cancel")
	put(t, in, p, task("ready"), &taskpickv1.NewTask{Id: "delayed", RunAt: timestampIn(time.Hour)}, task("leased"), &taskpickv1.NewTask{Id: "dead", MaxAttempts: 1})
	cancel := func(id string) error {
		_, err := in.client.CancelTask(ctx, &taskpickv1.CancelTaskRequest{Pool: p, Id: id})
		return err
	}
	cancelTask(t, in, p, "ready")
	cancelTask(t, in, p, "delayed")
	// Without retention a cancelled task is gone: Get and a second cancel say not_found.
	for _, id := range []string{"ready", "delayed", "missing"} {
		_, err := in.client.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: id})
		wantCode(t, err, connect.CodeNotFound)
		wantCode(t, cancel(id), connect.CodeNotFound)
	}
	got := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 10})
	if len(got) != 2 {
		t.Fatalf("Pick after the cancels: %v, want leased and dead only", ids(got))
	}
	for _, lt := range got {
		if lt.GetId() == "dead" {
			if _, err := in.client.Nack(ctx, &taskpickv1.NackRequest{Pool: p, Id: "dead", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := cancel("leased")
	wantCode(t, err, connect.CodeFailedPrecondition)
	if !strings.Contains(err.Error(), "leased") {
		t.Fatalf("cancel of a leased task: %q, want it to say the task is leased", err)
	}
	if s := get(t, in, p, "leased").GetState(); s != taskpickv1.State_STATE_LEASED {
		t.Fatalf("a refused cancel changed the task: %v", s)
	}
	wantCode(t, cancel("dead"), connect.CodeFailedPrecondition)
}

func testSettingsSurviveRestart(t *testing.T, b backendCase) {
	open := b.store(t)
	in, p := startInstance(t, b.name, open(t), nil), pool(t, "restart")
	n := uint32(7)
	want := setSettings(t, in, p, &taskpickv1.PoolSettings{MaxAttempts: &n, Retry: &taskpickv1.RetryPolicy{
		Initial: sec(1500 * time.Millisecond), Multiplier: 1.5, Max: sec(time.Minute), Jitter: 0.25}})
	pause(t, in, p, true)
	put(t, in, p, task("a"))
	// A new service over the same store, with a backend opened anew (its schema step runs again).
	again := startInstance(t, b.name, open(t), nil)
	got := getSettings(t, again, p)
	want.Paused = true
	if !got.GetStored() || !proto.Equal(got.GetSettings(), want) {
		t.Fatalf("after a restart: %v (stored %v), want %v", got.GetSettings(), got.GetStored(), want)
	}
	if l := pick(t, again, &taskpickv1.PickRequest{Pool: p}); len(l) != 0 {
		t.Fatalf("the pool paused before the restart leased %v", ids(l))
	}
	// A pool never configured answers the defaults, not stored.
	if d := getSettings(t, again, pool(t, "never")); d.GetStored() || d.GetSettings().GetRetry() != nil || d.GetSettings().MaxAttempts != nil {
		t.Fatalf("settings of an unconfigured pool: %v", d)
	}
}

// testConcurrentSettings: many writers at once leave one writer's record whole, and each
// writer is answered its own.
func testConcurrentSettings(t *testing.T, b backendCase) {
	in, p := one(t, b), pool(t, "racing")
	of := func(i int) *taskpickv1.PoolSettings {
		n := uint32(i + 1)
		return &taskpickv1.PoolSettings{MaxAttempts: &n, Retry: &taskpickv1.RetryPolicy{
			Initial: sec(time.Duration(i+1) * time.Second), Multiplier: float64(i + 1), Max: sec(time.Duration(i+1) * time.Minute),
			Jitter: float64(i) / 16}}
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			r, err := in.client.SetPoolSettings(ctx, &taskpickv1.SetPoolSettingsRequest{Pool: p, Settings: of(i)})
			if err != nil {
				t.Errorf("SetPoolSettings %d: %v", i, err)
				return
			}
			if !proto.Equal(r.GetSettings(), of(i)) {
				t.Errorf("writer %d was answered %v", i, r.GetSettings())
			}
		})
	}
	wg.Wait()
	got := getSettings(t, in, p).GetSettings()
	i := int(got.GetMaxAttempts()) - 1
	if i < 0 || i >= 16 || !proto.Equal(got, of(i)) {
		t.Fatalf("after 16 racing writers the record is %v: not one writer's whole", got)
	}
}

func timestampIn(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(time.Now().Add(d)) }
