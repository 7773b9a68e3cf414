package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

const (
	grabTasks       = 300
	grabConcurrency = 4
	grabHangAfter   = 5
)

// TestTaskGrab is the classic "A and B grab the same task" scenario at scale: 300 tasks put once into
// a pool shared by 3 coord instances; worker processes on different instances pick at random
// and do each task with a write guarded by its lease token, then ack. One worker is killed
// with SIGKILL while it holds leases it never acks. It attacks the atomic pick (two workers
// never do one task), fenced acks, and lease recovery: from the store's point of view every
// task is done exactly once (the killed worker's tasks redone by others with higher tokens),
// no task is lost or dead, and the pool ends empty.
func TestTaskGrab(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"redis", "mysql"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			runTaskGrab(t, backend)
		})
	}
}

func runTaskGrab(t *testing.T, backend string) {
	ins := startCluster(t, 3, backendArgs(t, backend)...)
	db := scenarioDB(t)
	tables := scenarioTables(t, db, "taskgrab", "fence", "done", "attempts")
	fence, done, attempts := tables[0], tables[1], tables[2]
	mustExec(t, db,
		"CREATE TABLE "+fence+" (task_id VARCHAR(64) PRIMARY KEY, token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE "+done+" (task_id VARCHAR(64) PRIMARY KEY, token BIGINT UNSIGNED NOT NULL, worker VARCHAR(32) NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE "+attempts+" (seq BIGINT AUTO_INCREMENT PRIMARY KEY, task_id VARCHAR(64) NOT NULL, token BIGINT UNSIGNED NOT NULL, worker VARCHAR(32) NOT NULL,"+
			" began_us BIGINT NOT NULL, expires_us BIGINT NOT NULL, gave_back BOOL NOT NULL DEFAULT FALSE) ENGINE=InnoDB")
	pool := testenv.Prefix(t)
	ids := make([]string, grabTasks)
	var values []string
	for i := range ids {
		ids[i] = fmt.Sprintf("task-%03d", i)
		values = append(values, fmt.Sprintf("('%s', 0)", ids[i]))
	}
	mustExec(t, db, "INSERT INTO "+fence+" VALUES "+strings.Join(values, ","))
	putTasks(t, ins, backend, pool, ids)
	checkStaleLease(t, ins, backend, pool+"-stale")

	start := func(name string, in *instance, extra ...string) *workerProc {
		args := append([]string{"-name", name, "-server", in.URL(), "-backend", backend, "-pool", pool,
			"-dsn", testenv.MySQLDSN(), "-fence", fence, "-done", done, "-attempts", attempts,
			"-ttl", "2s", "-concurrency", fmt.Sprint(grabConcurrency)}, extra...)
		return startWorker(t, name, args...)
	}
	count := func(q string) int64 { return queryInt(db, q) }
	hungQ := "SELECT COUNT(*) FROM " + attempts + " a WHERE worker = 'victim' AND NOT EXISTS (SELECT 1 FROM " + done + " d WHERE d.task_id = a.task_id AND d.token = a.token)"

	// The victim works a little, then hangs with a full hand of leases, kept alive.
	victim := start("victim", ins[1], "-hang-after", fmt.Sprint(grabHangAfter))
	pollUntil(t, 30*time.Second, "the victim hangs holding its leases", func() bool { return count(hungQ) == grabConcurrency })
	workers := []*workerProc{start("w1", ins[0]), start("w2", ins[1]), start("w3", ins[2])}
	pollUntil(t, 30*time.Second, "100 tasks done", func() bool { return count("SELECT COUNT(*) FROM "+done) >= 100 })
	victim.kill()
	pollUntil(t, 60*time.Second, "every task done", func() bool { return count("SELECT COUNT(*) FROM "+done) == grabTasks })
	var sum map[string]uint64
	for _, w := range workers {
		sum = addCounts(sum, w.stop(t))
	}

	// The store's view: each task once, the victim's held tasks redone with higher tokens.
	if n := count("SELECT COUNT(*) FROM " + done + " d JOIN " + fence + " f USING (task_id)"); n != grabTasks {
		t.Errorf("%d of the %d tasks recorded done, want all", n, grabTasks)
	}
	if n := count("SELECT COUNT(*) FROM (SELECT task_id, token FROM " + attempts + " GROUP BY task_id, token HAVING COUNT(*) > 1) x"); n != 0 {
		t.Errorf("%d leases (task, token) were handed to two handlers", n)
	}
	// A lease is promised until the expiry it was picked with (extensions only move it later):
	// a later lease of the task that began before then, unless the earlier handler failed and
	// gave the task back, means two workers held it at once.
	if n := count("SELECT COUNT(*) FROM " + attempts + " a JOIN " + attempts + " b ON b.task_id = a.task_id AND b.token > a.token WHERE b.began_us < a.expires_us AND NOT a.gave_back"); n != 0 {
		t.Errorf("%d leases began while an earlier lease of the same task was still promised", n)
	}
	hung := count(hungQ)
	if hung != grabConcurrency {
		t.Errorf("the killed victim held %d unfinished leases, want %d", hung, grabConcurrency)
	}
	if n := count("SELECT COUNT(*) FROM " + attempts + " a JOIN " + done + " d USING (task_id) WHERE a.worker = 'victim' AND d.worker <> 'victim' AND d.token > a.token"); n != hung {
		t.Errorf("of the victim's %d unfinished tasks, %d were redone by another worker with a higher token; want all", hung, n)
	}
	st, err := ins[2].Client().Tasks().Stats(context.Background(), &taskpickv1.StatsRequest{Backend: backend, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetAvailable()+st.GetDelayed()+st.GetLeased()+st.GetDead()+st.GetDone() != 0 {
		t.Errorf("pool after every task was done: %v; want empty (every task acked, none dead)", st)
	}
	if sum["dead"] != 0 {
		t.Errorf("workers saw %d tasks die", sum["dead"])
	}
	// The victim acked what it finished before it hung (each Ack frees its slot, and all its
	// slots hung); every other task's finisher must have acked it, once.
	if victimDone := count("SELECT COUNT(*) FROM " + done + " WHERE worker = 'victim'"); int64(sum["acked"]) != grabTasks-victimDone {
		t.Errorf("the surviving workers acked %d tasks, want the %d the victim did not finish", sum["acked"], grabTasks-victimDone)
	}
	redone := count("SELECT COUNT(*) FROM (SELECT task_id FROM " + attempts + " GROUP BY task_id HAVING COUNT(*) > 1) x")
	t.Logf("%s: %d tasks done once each by 4 worker processes; %d redone (%d held by the killed worker); survivors: %v",
		backend, grabTasks, redone, hung, sum)
}

// checkStaleLease: a lease that ran out and was picked again is stale everywhere. One task in
// its own pool is picked through one instance with the shortest lease, picked again through
// another once that lease ended, and then the old lease's Ack, Nack and Extend must each be
// refused with failed_precondition (a worker that wakes after a pause must not finish or
// return a task someone else holds) while the new lease's Ack goes through.
func checkStaleLease(t *testing.T, ins []*instance, backend, pool string) {
	t.Helper()
	ctx := context.Background()
	if _, err := ins[0].Client().Tasks().Put(ctx, &taskpickv1.PutRequest{Backend: backend, Pool: pool, Tasks: []*taskpickv1.NewTask{{Id: "probe"}}}); err != nil {
		t.Fatal(err)
	}
	pick := func(in *instance) *taskpickv1.LeasedTask {
		res, err := in.Client().Tasks().Pick(ctx, &taskpickv1.PickRequest{Backend: backend, Pool: pool, Count: 1,
			Ttl: durationpb.New(time.Second), Wait: durationpb.New(5 * time.Second)})
		if err != nil {
			t.Fatalf("pick through %s: %v", in.name, err)
		}
		if len(res.GetTasks()) > 1 {
			t.Fatalf("pick through %s: %d tasks, want at most the probe", in.name, len(res.GetTasks()))
		}
		if len(res.GetTasks()) == 0 {
			return nil // its wait ended first
		}
		return res.GetTasks()[0]
	}
	old := pick(ins[0])
	if old == nil {
		t.Fatal("the probe, just put, was not picked")
	}
	var cur *taskpickv1.LeasedTask
	deadline := time.Now().Add(30 * time.Second)
	for cur == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the probe was not picked again within 30s of its %v lease", time.Second)
		}
		if cur = pick(ins[1]); cur != nil && time.Now().Before(old.GetExpiresAt().AsTime()) {
			t.Fatalf("the probe was picked again at %v, before its first lease's expiry %v", time.Now(), old.GetExpiresAt().AsTime())
		}
	}
	if cur.GetLeaseToken() <= old.GetLeaseToken() {
		t.Errorf("the probe's second lease has token %d, not above the first's %d", cur.GetLeaseToken(), old.GetLeaseToken())
	}
	tasks := ins[2].Client().Tasks()
	stale := old.GetLeaseToken()
	for name, call := range map[string]func() error{
		"Ack": func() error {
			_, err := tasks.Ack(ctx, &taskpickv1.AckRequest{Backend: backend, Pool: pool, Id: "probe", LeaseToken: stale, LeaseSecret: old.GetLeaseSecret()})
			return err
		},
		"Nack": func() error {
			_, err := tasks.Nack(ctx, &taskpickv1.NackRequest{Backend: backend, Pool: pool, Id: "probe", LeaseToken: stale, LeaseSecret: old.GetLeaseSecret()})
			return err
		},
		"Extend": func() error {
			_, err := tasks.Extend(ctx, &taskpickv1.ExtendRequest{Backend: backend, Pool: pool, Id: "probe", LeaseToken: stale, LeaseSecret: old.GetLeaseSecret(), Ttl: durationpb.New(time.Minute)})
			return err
		},
	} {
		if err := call(); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("%s with the stale lease token %d (current %d): %v, want failed_precondition", name, stale, cur.GetLeaseToken(), err)
		}
	}
	if _, err := tasks.Ack(ctx, &taskpickv1.AckRequest{Backend: backend, Pool: pool, Id: "probe", LeaseToken: cur.GetLeaseToken(), LeaseSecret: cur.GetLeaseSecret()}); err != nil {
		t.Errorf("Ack with the current lease token %d: %v", cur.GetLeaseToken(), err)
	}
}

// putTasks puts the tasks once, then again through another instance: the second Put must
// create none (idempotent by id).
func putTasks(t *testing.T, ins []*instance, backend, pool string, ids []string) {
	t.Helper()
	tasks := make([]*taskpickv1.NewTask, len(ids))
	for i, id := range ids {
		tasks[i] = &taskpickv1.NewTask{Id: id}
	}
	for round, in := range ins[:2] {
		res, err := in.Client().Tasks().Put(context.Background(), &taskpickv1.PutRequest{Backend: backend, Pool: pool, Tasks: tasks})
		if err != nil {
			t.Fatal(err)
		}
		for i, created := range res.GetCreated() {
			if created != (round == 0) {
				t.Fatalf("put %d of %s: created=%v, want %v", round+1, ids[i], created, round == 0)
			}
		}
	}
}

// workerProc is one testdata/worker process.
type workerProc struct {
	name string
	cmd  *exec.Cmd
	out  *testenv.LogBuffer
	done chan struct{}
}

func startWorker(t *testing.T, name string, args ...string) *workerProc {
	t.Helper()
	w := &workerProc{name: name, out: &testenv.LogBuffer{}, done: make(chan struct{})}
	w.cmd = exec.Command(helperBinary(t, "worker"), args...)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the test
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.cmd.Wait(); close(w.done) }() //nolint:errcheck // stop reads the output
	t.Cleanup(func() {
		w.kill()
		if t.Failed() {
			t.Logf("worker %s output:\n%s", name, w.out.String())
		}
	})
	return w
}

// kill is SIGKILL: the worker dies mid-task.
func (w *workerProc) kill() {
	w.cmd.Process.Kill() //nolint:errcheck // it may have exited
	<-w.done
}

// stop is SIGTERM: the worker finishes what it runs and prints its counts.
func (w *workerProc) stop(t *testing.T) map[string]uint64 {
	t.Helper()
	w.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // done tells
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %s did not stop within 30s of SIGTERM:\n%s", w.name, w.out.String())
	}
	out := strings.TrimSpace(w.out.String())
	var counts map[string]uint64
	if err := json.Unmarshal([]byte(out[strings.LastIndexByte(out, '\n')+1:]), &counts); err != nil || !w.cmd.ProcessState.Success() {
		t.Fatalf("worker %s: %v, %v:\n%s", w.name, w.cmd.ProcessState, err, out)
	}
	return counts
}

func addCounts(sum, c map[string]uint64) map[string]uint64 {
	if sum == nil {
		sum = map[string]uint64{}
	}
	for k, v := range c {
		sum[k] += v
	}
	return sum
}
