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
// exactly once.
func TestPoolMaxLeased(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"redis", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			runPoolMaxLeased(t, backend)
		})
	}
}

func runPoolMaxLeased(t *testing.T, backend string) {
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
			if err := c.Work(wctx, name, handler, client.WithTaskBackend(backend), client.WithWorkStats(&stats[w])); err != nil {
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
	pollUntil(t, 90*time.Second, "every task acked", func() bool { return acked() >= limitTasks })
	stop()
	wg.Wait()

	if m := most.Load(); m != limitMax {
		t.Errorf("most tasks in handlers at once: %d, want %d (the limit, reached by 32 workers)", m, limitMax)
	}
	var sum struct{ picked, acked, nacked, lost, finishErrs uint64 }
	for i := range stats {
		sum.picked += stats[i].Picked.Load()
		sum.acked += stats[i].Acked.Load()
		sum.nacked += stats[i].Nacked.Load()
		sum.lost += stats[i].LeasesLost.Load()
		sum.finishErrs += stats[i].FinishErrors.Load()
	}
	if sum.picked != limitTasks || sum.acked != limitTasks || sum.nacked+sum.lost+sum.finishErrs != 0 {
		t.Errorf("workers picked %d, acked %d, nacked %d, lost %d leases, %d failed finishes; want %d picked and acked, nothing else",
			sum.picked, sum.acked, sum.nacked, sum.lost, sum.finishErrs, limitTasks)
	}
	for _, id := range ids {
		if handled[id] != 1 {
			t.Errorf("task %s handled %d times, want once", id, handled[id])
		}
	}
	st, err := ins[2].Client().Tasks().Stats(ctx, &taskpickv1.StatsRequest{Backend: backend, Pool: name})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetAvailable()+st.GetDelayed()+st.GetLeased()+st.GetDead()+st.GetDone() != 0 {
		t.Errorf("pool after every task was acked: %v; want empty", st)
	}
	t.Logf("%s: %d tasks acked once each by %d workers on 3 instances, at most %d in handlers at once", backend, sum.acked, limitWorkers, most.Load())
}
