package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// The shape of TestPoolMaxLeased.
const (
	limitTasks   = 300
	limitWorkers = 32
	limitMax     = 5
)

// TestPoolMaxLeased: 3 coord instances over one store, a pool limited to 5 leased tasks, and
// 32 SDK workers (client.Work, spread over the instances) each holding its task 20-50ms. It
// attacks the limit across processes: the tasks in the workers' handlers at once, counted by
// the workers themselves, reach 5 and never pass it, and every task is handled and acked
// exactly once. The kill row SIGKILLs one instance a third of the way through and starts it
// again: its workers' Picks and Acks fail until it is back, the leases it answered for
// run out, and the limit must still hold while every task ends acked (handled again only
// where an Ack was lost).
func TestPoolMaxLeased(t *testing.T) {
	t.Parallel()
	for _, row := range []struct {
		backend string
		kill    bool
	}{{"redis", false}, {"postgres", false}, {"postgres", true}} {
		name := row.backend
		if row.kill {
			name += "-kill"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runPoolMaxLeased(t, row.backend, row.kill)
		})
	}
}

// limitLeaseTTL is the workers' lease: far longer than a handler on a loaded machine (a
// lease that ran out under a running handler would let a sixth task in), short enough that
// the leases a killed instance answered for come back soon.
const limitLeaseTTL = 10 * time.Second

func runPoolMaxLeased(t *testing.T, backend string, kill bool) {
	ins := startCluster(t, 3, backendArgs(t, backend)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := testenv.Prefix(t)
	set, err := ins[0].Client().Pool(backend, name).SetSettings(ctx, client.PoolSettings{MaxLeased: limitMax})
	if err != nil || set.MaxLeased != limitMax {
		t.Fatalf("SetSettings: %+v, %v", set, err)
	}
	ids := make([]string, limitTasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("task-%03d", i)
	}
	putTasks(t, ins, backend, name, ids)

	var live, most atomic.Int64
	var mu sync.Mutex
	handled := map[string]int{}
	stats := make([]client.WorkStats, limitWorkers)
	handler := func(ctx context.Context, task *client.Task) error {
		n := live.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		mu.Lock()
		handled[task.ID]++
		mu.Unlock()
		time.Sleep(time.Duration(20+rand.IntN(31)) * time.Millisecond)
		live.Add(-1)
		return nil
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for w := range limitWorkers {
		c := ins[w%len(ins)].Client()
		wg.Go(func() {
			if err := c.Work(wctx, name, handler, client.WithTaskBackend(backend), client.WithWorkStats(&stats[w]),
				client.WithLeaseTTL(limitLeaseTTL)); err != nil {
				t.Errorf("worker %d: %v", w, err)
			}
		})
	}
	acked := func() (n uint64) {
		for i := range stats {
			n += stats[i].Acked.Load()
		}
		return n
	}
	if kill {
		pollUntil(t, 60*time.Second, "a third of the tasks acked", func() bool { return acked() >= limitTasks/3 })
		ins[2].Stop() // SIGKILL
		time.Sleep(500 * time.Millisecond)
		ins[2].Start()
	}
	// Poll the store: with a kill, an Ack applied but not answered counts for no worker.
	st := &taskpickv1.StatsResponse{}
	pollUntil(t, 90*time.Second, "every task acked", func() bool {
		st, err = ins[0].Client().Tasks().Stats(ctx, &taskpickv1.StatsRequest{Backend: backend, Pool: name})
		return err == nil && st.GetAvailable()+st.GetDelayed()+st.GetLeased() == 0
	})
	stop()
	wg.Wait()

	if m := most.Load(); m != limitMax {
		t.Errorf("most tasks in handlers at once: %d, want %d (the limit, reached by 32 workers)", m, limitMax)
	}
	var sum struct{ picked, acked, nacked, lost, finishErrs, pickErrs uint64 }
	for i := range stats {
		sum.picked += stats[i].Picked.Load()
		sum.acked += stats[i].Acked.Load()
		sum.nacked += stats[i].Nacked.Load()
		sum.lost += stats[i].LeasesLost.Load()
		sum.finishErrs += stats[i].FinishErrors.Load()
		sum.pickErrs += stats[i].PickErrors.Load()
	}
	again := 0
	for _, id := range ids {
		switch {
		case handled[id] == 0:
			t.Errorf("task %s never handled", id)
		case handled[id] > 1 && !kill:
			t.Errorf("task %s handled %d times, want once", id, handled[id])
		case handled[id] > 1:
			again += handled[id] - 1
		}
	}
	unfinished := sum.lost + sum.finishErrs // handled, but the Ack went unanswered
	switch {
	case sum.nacked != 0:
		t.Errorf("workers nacked %d tasks, want none (no handler fails)", sum.nacked)
	case !kill && (sum.picked != limitTasks || sum.acked != limitTasks || unfinished != 0):
		t.Errorf("workers picked %d, acked %d, %d unfinished; want %d picked and acked, none unfinished",
			sum.picked, sum.acked, unfinished, limitTasks)
	case sum.acked > limitTasks || sum.acked+unfinished < limitTasks:
		t.Errorf("workers acked %d tasks with %d unfinished, want %d in all", sum.acked, unfinished, limitTasks)
	case uint64(again) > unfinished:
		t.Errorf("tasks handled again %d times, but only %d Acks went unanswered", again, unfinished)
	}
	if st.GetDead() != 0 {
		t.Errorf("pool after every task was acked: %v; want none dead", st)
	}
	t.Logf("%s kill=%v: %d tasks; %d acked by %d workers on 3 instances, %d unfinished, %d handled again, %d Picks failed; at most %d in handlers at once",
		backend, kill, limitTasks, sum.acked, limitWorkers, unfinished, again, sum.pickErrs, most.Load())
}
