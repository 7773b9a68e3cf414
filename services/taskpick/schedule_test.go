package taskpick_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
)

// fakeClock is the schedulers' clock in these tests: it moves only when the test moves it,
// so a tick fires when the test says and no sooner, however loaded the machine.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(at time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(at.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *fakeClock) Tick(n int) time.Time {
	return c.Now().Truncate(time.Second).Add(time.Duration(n) * time.Second)
}
func scheduleClock(clk *fakeClock) func(*taskpick.Config) {
	return func(cfg *taskpick.Config) {
		cfg.Clock, cfg.ScheduleInterval, cfg.ScheduleGrace = clk.Now, 10*time.Millisecond, 5*time.Second
	}
}

// testGrace is the schedulers' grace in these tests (scheduleClock).
const testGrace = 5 * time.Second

// testSchedules runs the schedule behaviours one after another, each at a fake time of its
// own far in the future, each on a store of its own (scheduleStore): a scheduler whose clock
// runs years ahead fires every schedule it finds due.
func testSchedules(t *testing.T, b backendCase) {
	for i, c := range []struct {
		name string
		run  func(t *testing.T, b backendCase, clk *fakeClock)
	}{
		{"OneTaskPerTickAcrossThreeInstances", testScheduleOncePerTick},
		{"RacingFiresApplyOnce", testScheduleRacingFires},
		{"PauseResumeDelete", testSchedulePauseResumeDelete},
		{"MissedTicksSkipOrRunOnce", testScheduleMissed},
		{"PutReplacesListPagesZones", testSchedulePutList},
		{"PutWhileFiringWinsWhole", testSchedulePutWhileFiring},
		{"TemplateTakesPoolDefault", testScheduleTemplateDefault},
		{"RePutOfTheSameSpecKeepsItsDueTick", testScheduleRePutKeepsTick},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, b, newFakeClock(time.Date(2100+10*i, 1, 1, 0, 0, 0, 500e6, time.UTC)))
		})
	}
}

// scheduleStore is b's store for the schedule rows: on MySQL a database of the test's own,
// dropped when it ends, since a scheduler on a fake clock fires every schedule it finds due
// in its table (in the shared table, those of every other test, at the wrong time).
func scheduleStore(t *testing.T, b backendCase) func(t *testing.T) taskpick.Backend {
	if b.name != "mysql" {
		return b.store(t)
	}
	name := fmt.Sprintf("coordkit_sched_%x", rand.Uint64())
	admin, err := sqldb.OpenMySQL(ctx, testenv.MySQLDSN(), 1)
	if err != nil {
		t.Fatalf("open mysql: %v", err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		admin, err := sqldb.OpenMySQL(ctx, testenv.MySQLDSN(), 1)
		if err == nil {
			admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name) //nolint:errcheck // best effort
			admin.Close()
		}
	})
	dsn := testenv.MySQLDSN()
	at := strings.Index(dsn, ")/") + 2
	end := strings.IndexByte(dsn[at:], '?')
	if end < 0 {
		end = len(dsn) - at
	}
	dsn = dsn[:at] + name + dsn[at+end:]
	return func(t *testing.T) taskpick.Backend {
		db, err := sqldb.OpenMySQL(ctx, dsn, 16)
		if err != nil {
			t.Fatalf("open mysql: %v", err)
		}
		t.Cleanup(func() { db.Close() })
		return sqlBackend(t, db)
	}
}

// schedulers starts n instances with schedulers on clk over one store.
func schedulers(t *testing.T, b backendCase, clk *fakeClock, n int) []*instance {
	open := scheduleStore(t, b)
	var ins []*instance
	for range n {
		ins = append(ins, startInstance(t, b.name, open(t), nil, scheduleClock(clk)))
	}
	return ins
}

func putSchedule(t *testing.T, in *instance, req *taskpickv1.PutScheduleRequest) *taskpickv1.Schedule {
	t.Helper()
	r, err := in.client.PutSchedule(ctx, req)
	if err != nil {
		t.Fatalf("PutSchedule %s: %v", req.GetName(), err)
	}
	// Deleted before the instances stop (cleanups run last first), so no schedule is left
	// due in a shared table.
	t.Cleanup(func() {
		in.client.DeleteSchedule(ctx, &taskpickv1.DeleteScheduleRequest{Pool: req.GetPool(), Name: req.GetName()})
	})
	return r.GetSchedule()
}

func getSchedule(t *testing.T, in *instance, pool, name string) *taskpickv1.Schedule {
	t.Helper()
	r, err := in.client.GetSchedule(ctx, &taskpickv1.GetScheduleRequest{Pool: pool, Name: name})
	if err != nil {
		t.Fatalf("GetSchedule %s: %v", name, err)
	}
	return r.GetSchedule()
}

// waitFired waits until the schedule's last fire is tick.
func waitFired(t *testing.T, in *instance, pool, name string, tick time.Time) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("schedule %s fires %v", name, tick), func() bool {
		return getSchedule(t, in, pool, name).GetLastFire().AsTime().Equal(tick)
	})
}

// taskIDs lists the pool's available tasks by picking them all.
func taskIDs(t *testing.T, in *instance, pool string) []string {
	t.Helper()
	var out []string
	for {
		ts := pick(t, in, &taskpickv1.PickRequest{Pool: pool, Count: 100})
		if len(ts) == 0 {
			slices.Sort(out)
			return out
		}
		out = append(out, ids(ts)...)
	}
}

func tickIDs(name string, ticks ...time.Time) []string {
	var out []string
	for _, tk := range ticks {
		out = append(out, taskpick.ScheduledTaskID(name, tk))
	}
	slices.Sort(out)
	return out
}

func testScheduleOncePerTick(t *testing.T, b backendCase, clk *fakeClock) {
	ins := schedulers(t, b, clk, 3)
	p := pool(t, "sched-once")
	sc := putSchedule(t, ins[0], &taskpickv1.PutScheduleRequest{Pool: p, Name: "every-second", Spec: "* * * * * *",
		Template: &taskpickv1.ScheduleTemplate{Payload: []byte("tick"), Priority: 3, MaxAttempts: 2}})
	if got, want := sc.GetNextFire().AsTime(), clk.Tick(1); !got.Equal(want) {
		t.Fatalf("next fire %v, want %v", got, want)
	}
	var ticks []time.Time
	for i := range 3 {
		clk.Add(time.Second)
		ticks = append(ticks, clk.Tick(0))
		waitFired(t, ins[i%3], p, "every-second", clk.Tick(0))
	}
	got := taskIDs(t, ins[1], p)
	if want := tickIDs("every-second", ticks...); !slices.Equal(got, want) {
		t.Fatalf("tasks %v, want one per tick %v", got, want)
	}
	task := get(t, ins[2], p, got[0])
	if string(task.GetPayload()) != "tick" || task.GetPriority() != 3 || task.GetMaxAttempts() != 2 {
		t.Fatalf("task %v is not the template", task)
	}
}

// testScheduleRacingFires fires one due schedule from many callers on several backends at
// once, each planning a task of a different id: only the check that the schedule's next fire
// is still the one planned from keeps it to one task.
func testScheduleRacingFires(t *testing.T, b backendCase, clk *fakeClock) {
	open := scheduleStore(t, b)
	stores := []taskpick.Backend{open(t), open(t), open(t)}
	in := startInstance(t, b.name, stores[0], nil, func(cfg *taskpick.Config) { cfg.Clock, cfg.ScheduleInterval = clk.Now, time.Hour })
	p := pool(t, "sched-race")
	putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: "race", Spec: "@every 1s"})
	clk.Add(time.Second)
	var fired atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			f, err := stores[i%3].FireDue(ctx, clk.Now(), 10, func(s taskpick.Schedule) taskpick.Fire {
				if s.Pool != p {
					return taskpick.Fire{Fired: s.NextFire, Next: s.NextFire.Add(time.Hour)}
				}
				return taskpick.Fire{Fired: s.NextFire, Next: s.NextFire.Add(time.Hour), Task: &taskpick.NewTask{ID: fmt.Sprint("racer-", i), MaxAttempts: 1}}
			})
			if err != nil {
				t.Errorf("FireDue: %v", err)
			}
			for _, x := range f {
				if x.Pool == p {
					fired.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := fired.Load(); n != 1 {
		t.Fatalf("%d fires applied, want 1", n)
	}
	if got := taskIDs(t, in, p); len(got) != 1 {
		t.Fatalf("tasks %v, want one", got)
	}
}

// testSchedulePutWhileFiring deletes a schedule and puts it again with another spec and
// template whose next tick is the same while a fire planned from the old one is in flight: the fire must apply
// before the put or not at all, never the old plan over the new schedule (which would leave
// it due at a time its spec never ticks, putting the old template).
func testSchedulePutWhileFiring(t *testing.T, b backendCase, clk *fakeClock) {
	open := scheduleStore(t, b)
	store := open(t)
	in := startInstance(t, b.name, store, nil, func(cfg *taskpick.Config) { cfg.Clock, cfg.ScheduleInterval = clk.Now, time.Hour })
	p := pool(t, "sched-reput")
	tick := clk.Tick(1) // a tick of both specs: second 1 of the minute
	putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: "s", Spec: "* * * * * *", Template: &taskpickv1.ScheduleTemplate{Payload: []byte("old")}})
	put := make(chan error, 1)
	_, err := store.FireDue(ctx, tick, 10, func(s taskpick.Schedule) taskpick.Fire {
		if s.Pool != p {
			return taskpick.Fire{Fired: s.NextFire, Next: s.NextFire.Add(time.Hour)}
		}
		go func() { // deleted first: a schedule made anew must not look like the one planned from
			if _, err := in.client.DeleteSchedule(ctx, &taskpickv1.DeleteScheduleRequest{Pool: p, Name: "s"}); err != nil {
				put <- err
				return
			}
			_, err := in.client.PutSchedule(ctx, &taskpickv1.PutScheduleRequest{Pool: p, Name: "s", Spec: "1 * * * * *",
				Template: &taskpickv1.ScheduleTemplate{Payload: []byte("new")}})
			put <- err
		}()
		select { // SQL holds the row until the fire commits; Redis puts at once
		case err := <-put:
			put <- err
		case <-time.After(300 * time.Millisecond):
		}
		return taskpick.Fire{Fired: s.NextFire, Next: s.NextFire.Add(time.Second),
			Task: &taskpick.NewTask{ID: taskpick.ScheduledTaskID(s.Name, s.NextFire), Payload: s.Payload, MaxAttempts: 1}}
	})
	if err != nil {
		t.Fatalf("FireDue: %v", err)
	}
	if err := <-put; err != nil {
		t.Fatalf("PutSchedule: %v", err)
	}
	sc := getSchedule(t, in, p, "s")
	if nf := sc.GetNextFire().AsTime(); sc.GetSpec() != "1 * * * * *" || nf.Second() != 1 {
		t.Fatalf("schedule %s due at %v: the old plan applied over the new spec", sc.GetSpec(), nf)
	}
}

// testScheduleTemplateDefault: a template without max_attempts puts tasks as a Put without
// one does, with the pool's default attempts, read when the task is put.
func testScheduleTemplateDefault(t *testing.T, b backendCase, clk *fakeClock) {
	in := schedulers(t, b, clk, 1)[0]
	p := pool(t, "sched-default")
	sc := putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: "d", Spec: "* * * * * *"})
	if got := sc.GetTemplate().GetMaxAttempts(); got != 0 {
		t.Fatalf("template max_attempts %d, want 0 (unset: the pool's default)", got)
	}
	n := uint32(3)
	setSettings(t, in, p, &taskpickv1.PoolSettings{MaxAttempts: &n})
	clk.Add(time.Second)
	waitFired(t, in, p, "d", clk.Tick(0))
	if got := get(t, in, p, taskpick.ScheduledTaskID("d", clk.Tick(0))).GetMaxAttempts(); got != n {
		t.Fatalf("scheduled task max_attempts %d, want the pool's %d", got, n)
	}
}

// testScheduleRePutKeepsTick: a PutSchedule of the spec and zone a schedule has (a config
// applied again on every deploy) keeps its next tick, also one that is due and not fired yet,
// so the re-put loses no tick; another spec is reckoned anew from now.
func testScheduleRePutKeepsTick(t *testing.T, b backendCase, clk *fakeClock) {
	open := scheduleStore(t, b)
	in := startInstance(t, b.name, open(t), nil, func(cfg *taskpick.Config) { cfg.Clock, cfg.ScheduleInterval = clk.Now, time.Hour })
	p := pool(t, "sched-reput-same")
	req := &taskpickv1.PutScheduleRequest{Pool: p, Name: "m", Spec: "0 * * * * *", Timezone: "Europe/Berlin"}
	tick := putSchedule(t, in, req).GetNextFire().AsTime()
	clk.Add(tick.Sub(clk.Now()) + 200*time.Millisecond) // due, not fired yet
	req.Template = &taskpickv1.ScheduleTemplate{Payload: []byte("v2")}
	if got := putSchedule(t, in, req).GetNextFire().AsTime(); !got.Equal(tick) {
		t.Fatalf("re-put of the same spec moved the due tick %v to %v: that tick is lost", tick, got)
	}
	req.Spec = "30 * * * * *"
	if got, want := putSchedule(t, in, req).GetNextFire().AsTime(), tick.Add(30*time.Second); !got.Equal(want) {
		t.Fatalf("re-put of another spec: next fire %v, want %v", got, want)
	}
}

func testSchedulePauseResumeDelete(t *testing.T, b backendCase, clk *fakeClock) {
	in := schedulers(t, b, clk, 1)[0]
	p, marker := pool(t, "sched-pause"), pool(t, "sched-marker")
	putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: marker, Name: "m", Spec: "@every 1s"})
	putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: "s", Spec: "* * * * * *"})
	putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: "gone", Spec: "* * * * * *"})
	r, err := in.client.PauseSchedule(ctx, &taskpickv1.PauseScheduleRequest{Pool: p, Name: "s"})
	if err != nil || !r.GetSchedule().GetPaused() || r.GetSchedule().GetNextFire() != nil {
		t.Fatalf("PauseSchedule: %v %v, want paused with no next fire", r, err)
	}
	if _, err := in.client.DeleteSchedule(ctx, &taskpickv1.DeleteScheduleRequest{Pool: p, Name: "gone"}); err != nil {
		t.Fatalf("DeleteSchedule: %v", err)
	}
	_, err = in.client.DeleteSchedule(ctx, &taskpickv1.DeleteScheduleRequest{Pool: p, Name: "gone"})
	wantCode(t, err, connect.CodeNotFound)
	_, err = in.client.GetSchedule(ctx, &taskpickv1.GetScheduleRequest{Pool: p, Name: "gone"})
	wantCode(t, err, connect.CodeNotFound)
	_, err = in.client.PauseSchedule(ctx, &taskpickv1.PauseScheduleRequest{Pool: p, Name: "gone"})
	wantCode(t, err, connect.CodeNotFound)
	_, err = in.client.ResumeSchedule(ctx, &taskpickv1.ResumeScheduleRequest{Pool: p, Name: "gone"})
	wantCode(t, err, connect.CodeNotFound)

	clk.Add(3 * time.Second)
	// The marker fires in the same pass that would have fired the paused and the deleted one.
	waitFired(t, in, marker, "m", clk.Tick(0))
	if got := taskIDs(t, in, p); len(got) != 0 {
		t.Fatalf("paused and deleted schedules put %v", got)
	}
	res, err := in.client.ResumeSchedule(ctx, &taskpickv1.ResumeScheduleRequest{Pool: p, Name: "s"})
	if err != nil || res.GetSchedule().GetPaused() || !res.GetSchedule().GetNextFire().AsTime().Equal(clk.Tick(1)) {
		t.Fatalf("ResumeSchedule: %v %v, want running from the next tick %v (ticks while paused are not fired)", res, err, clk.Tick(1))
	}
	again, err := in.client.ResumeSchedule(ctx, &taskpickv1.ResumeScheduleRequest{Pool: p, Name: "s"})
	if err != nil || !again.GetSchedule().GetNextFire().AsTime().Equal(clk.Tick(1)) {
		t.Fatalf("ResumeSchedule of a running schedule: %v %v, want it unchanged", again, err)
	}
	clk.Add(time.Second)
	waitFired(t, in, p, "s", clk.Tick(0))
	if got, want := taskIDs(t, in, p), tickIDs("s", clk.Tick(0)); !slices.Equal(got, want) {
		t.Fatalf("after resume tasks %v, want %v", got, want)
	}
}

// testScheduleMissed jumps the clock a minute while nothing fires, as an outage of every
// instance would: ticks more than the grace old were missed (skip: none; run once: one task
// for all, named by the first), and the ticks within the grace fire one by one.
func testScheduleMissed(t *testing.T, b backendCase, clk *fakeClock) {
	in := schedulers(t, b, clk, 1)[0]
	p := pool(t, "sched-missed")
	skip := putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: "skip", Spec: "* * * * * *"})
	putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: "once", Spec: "* * * * * *", Missed: taskpickv1.ScheduleMissed_SCHEDULE_MISSED_RUN_ONCE})
	first := skip.GetNextFire().AsTime()
	clk.Add(60 * time.Second)
	now := clk.Now()
	var recent []time.Time // ticks less than the grace old: they fire
	for tk := first; !tk.After(now); tk = tk.Add(time.Second) {
		if now.Sub(tk) < testGrace {
			recent = append(recent, tk)
		}
	}
	waitFired(t, in, p, "skip", clk.Tick(0))
	waitFired(t, in, p, "once", clk.Tick(0))
	want := append(tickIDs("skip", recent...), tickIDs("once", append([]time.Time{first}, recent...)...)...)
	slices.Sort(want)
	if got := taskIDs(t, in, p); !slices.Equal(got, want) {
		t.Fatalf("after a %v outage tasks\n%v\nwant\n%v", 60*time.Second, got, want)
	}
	if got := getSchedule(t, in, p, "skip").GetNextFire().AsTime(); !got.Equal(clk.Tick(1)) {
		t.Fatalf("next fire %v, want %v", got, clk.Tick(1))
	}
}

func testSchedulePutList(t *testing.T, b backendCase, clk *fakeClock) {
	in := schedulers(t, b, clk, 1)[0]
	p := pool(t, "sched-list")
	ny := putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: "c", Spec: "0 9 * * *", Timezone: "America/New_York"})
	loc, _ := time.LoadLocation("America/New_York")
	if nf := ny.GetNextFire().AsTime().In(loc); nf.Hour() != 9 || nf.Minute() != 0 || ny.GetTimezone() != "America/New_York" {
		t.Fatalf("next fire %v, want 09:00 in New York", nf)
	}
	for _, n := range []string{"a", "e", "b", "d"} {
		putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: n, Spec: "@hourly"})
	}
	if _, err := in.client.PauseSchedule(ctx, &taskpickv1.PauseScheduleRequest{Pool: p, Name: "b"}); err != nil {
		t.Fatal(err)
	}
	r, err := in.client.PutSchedule(ctx, &taskpickv1.PutScheduleRequest{Pool: p, Name: "b", Spec: "@daily", Template: &taskpickv1.ScheduleTemplate{Payload: []byte("v2")}})
	if err != nil || r.GetCreated() || !r.GetSchedule().GetPaused() || r.GetSchedule().GetNextFire() != nil ||
		r.GetSchedule().GetSpec() != "@daily" || string(r.GetSchedule().GetTemplate().GetPayload()) != "v2" {
		t.Fatalf("PutSchedule over a paused schedule: %v %v, want it replaced and still paused", r, err)
	}
	var names []string
	after := ""
	for pages := 0; ; pages++ {
		l, err := in.client.ListSchedules(ctx, &taskpickv1.ListSchedulesRequest{Pool: p, Limit: 2, After: after})
		if err != nil || pages > 3 {
			t.Fatalf("ListSchedules: %v (page %d)", err, pages)
		}
		for _, s := range l.GetSchedules() {
			names = append(names, s.GetName())
		}
		if after = l.GetNextAfter(); after == "" {
			break
		}
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(names, want) {
		t.Fatalf("listed %v, want %v", names, want)
	}
}

// TestScheduleBadInput sends hostile schedules: each is invalid_argument naming its field,
// and none is stored.
func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	in := one(t, backendNamed("sqlite"))
	p := pool(t, "sched-bad")
	big := strings.Repeat("n", taskpick.MaxScheduleNameBytes+1)
	for _, c := range []struct {
		req   *taskpickv1.PutScheduleRequest
		field string
	}{
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "61 * * * *"}, "spec"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "* * *"}, "spec"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: ""}, "spec"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "0 0 30 2 *"}, "never fire"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "@every 500ms"}, "spec"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "@every 1.5s"}, "spec"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "TZ=Europe/Berlin * * * * *"}, "spec"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: strings.Repeat("*", taskpick.MaxSpecBytes+1)}, "spec"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "@daily", Timezone: "Mars/Olympus_Mons"}, "timezone"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "@daily", Timezone: "Local"}, "timezone"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "@daily", Timezone: "../../etc/passwd"}, "timezone"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "@daily", Timezone: strings.Repeat("Europe/", 100000)}, "timezone"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: big, Spec: "@daily"}, "name"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "", Spec: "@daily"}, "name"},
		{&taskpickv1.PutScheduleRequest{Pool: "", Name: "x", Spec: "@daily"}, "pool"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "@daily", Template: &taskpickv1.ScheduleTemplate{Payload: make([]byte, taskpick.MaxPayloadBytes+1)}}, "template.payload"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "@daily", Template: &taskpickv1.ScheduleTemplate{MaxAttempts: taskpick.MaxAttempts + 1}}, "template.max_attempts"},
		{&taskpickv1.PutScheduleRequest{Pool: p, Name: "x", Spec: "@daily", Missed: 9}, "missed"},
		{&taskpickv1.PutScheduleRequest{Backend: "nope", Pool: p, Name: "x", Spec: "@daily"}, "backend"},
	} {
		_, err := in.client.PutSchedule(ctx, c.req)
		wantCode(t, err, connect.CodeInvalidArgument)
		if len(err.Error()) > 1024 {
			t.Errorf("error of %d bytes: a hostile value must not come back whole", len(err.Error()))
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("spec %q: error %q does not name %s", c.req.GetSpec(), err, c.field)
		}
	}
	l, err := in.client.ListSchedules(ctx, &taskpickv1.ListSchedulesRequest{Pool: p})
	if err != nil || len(l.GetSchedules()) != 0 {
		t.Fatalf("ListSchedules after bad puts: %v %v, want none stored", l, err)
	}
	_, err = in.client.ListSchedules(ctx, &taskpickv1.ListSchedulesRequest{Pool: p, Limit: taskpick.MaxListSchedules + 1})
	wantCode(t, err, connect.CodeInvalidArgument)
}

// TestScheduleStorm makes many schedules due at once on three instances: every one fires
// once, a bounded batch at a time, and none is left behind. COORDKIT_SCHEDULE_STORM sets
// how many (300 by default; docs/benchmarks.md has 10,000).
func TestScheduleStorm(t *testing.T) {
	t.Parallel()
	n := 300
	if v := os.Getenv("COORDKIT_SCHEDULE_STORM"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	for _, name := range []string{"redis", "mysql", "postgres", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := backendNamed(name)
			clk := newFakeClock(time.Date(2200, 1, 1, 0, 0, 0, 500e6, time.UTC))
			open := scheduleStore(t, b)
			seed := open(t)
			p := pool(t, "storm")
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := w; i < n; i += 8 {
						if _, _, err := seed.PutSchedule(ctx, taskpick.Schedule{Pool: p, Name: fmt.Sprint("s", i), Spec: "* * * * * *", Timezone: "UTC",
							MaxAttempts: 1, Missed: taskpick.MissedSkip, NextFire: clk.Tick(1)}); err != nil {
							t.Errorf("PutSchedule: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			var ins []*instance
			for range 3 {
				ins = append(ins, startInstance(t, b.name, open(t), nil, func(cfg *taskpick.Config) {
					cfg.Clock, cfg.ScheduleInterval = clk.Now, 50*time.Millisecond
				}))
			}
			clk.Add(time.Second)
			took := waitFor(t, 2*time.Minute, fmt.Sprintf("%d due schedules fire", n), func() bool {
				return stats(t, ins[0], p).GetAvailable() == uint64(n)
			})
			t.Logf("%s: %d schedules due at once fired in %v on 3 instances", name, n, took.Round(time.Millisecond))
			for _, s := range []string{"s0", fmt.Sprint("s", n-1)} {
				if got := getSchedule(t, ins[1], p, s).GetNextFire().AsTime(); !got.Equal(clk.Tick(1)) {
					t.Fatalf("%s next fire %v, want %v", s, got, clk.Tick(1))
				}
			}
		})
	}
}

// listCounting records the largest ListSchedules limit its backend was asked for.
type listCounting struct {
	taskpick.Backend
	most atomic.Int64
}

func (l *listCounting) ListSchedules(ctx context.Context, pool, after string, limit int) ([]taskpick.Schedule, error) {
	for m := l.most.Load(); int64(limit) > m && !l.most.CompareAndSwap(m, int64(limit)); m = l.most.Load() {
	}
	return l.Backend.ListSchedules(ctx, pool, after, limit)
}

// TestListSchedulesReadsInChunks: a page of up to 1,000 schedules, each with a template of
// up to 256 KiB, is read from the backend a bounded chunk at a time, not whole only to be
// cut at the 4 MiB answer limit, and the pages still list every schedule once, in order.
func TestListSchedulesReadsInChunks(t *testing.T) {
	t.Parallel()
	lc := &listCounting{Backend: backendNamed("sqlite").store(t)(t)}
	in := startInstance(t, "sqlite", lc, nil)
	p := pool(t, "sched-chunks")
	var want []string
	for i := range 40 {
		name := fmt.Sprintf("s%02d", i)
		want = append(want, name)
		putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: p, Name: name, Spec: "@yearly"})
	}
	for _, limit := range []uint32{1000, 16, 17, 25, 1} {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			l, err := in.client.ListSchedules(ctx, &taskpickv1.ListSchedulesRequest{Pool: p, Limit: limit, After: after})
			if err != nil || pages > 40 || len(l.GetSchedules()) > int(limit) {
				t.Fatalf("ListSchedules limit %d: %d schedules, %v (page %d)", limit, len(l.GetSchedules()), err, pages)
			}
			for _, s := range l.GetSchedules() {
				got = append(got, s.GetName())
			}
			if after = l.GetNextAfter(); after == "" {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d listed %v, want %v", limit, got, want)
		}
	}
	// Templates of the largest size: a page is cut before the answer limit, and paging on
	// lists the rest.
	big, n, pages := pool(t, "sched-big"), 0, 0
	for i := range 20 {
		putSchedule(t, in, &taskpickv1.PutScheduleRequest{Pool: big, Name: fmt.Sprintf("b%02d", i), Spec: "@yearly",
			Template: &taskpickv1.ScheduleTemplate{Payload: make([]byte, taskpick.MaxPayloadBytes)}})
	}
	for after := ""; ; pages++ {
		l, err := in.client.ListSchedules(ctx, &taskpickv1.ListSchedulesRequest{Pool: big, Limit: 1000, After: after})
		if err != nil || pages > 20 || proto.Size(l) > taskpick.DefaultMaxAnswerBytes {
			t.Fatalf("ListSchedules of large templates: %d bytes, %v (page %d)", proto.Size(l), err, pages)
		}
		n += len(l.GetSchedules())
		if after = l.GetNextAfter(); after == "" {
			break
		}
	}
	if n != 20 || pages == 0 {
		t.Fatalf("listed %d large schedules in %d pages, want 20 in more than one", n, pages+1)
	}
	if m := lc.most.Load(); m > 32 {
		t.Fatalf("the backend was asked for %d schedules at once", m)
	}
}
