package e2e

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// The PostgreSQL rows of TestChaos run every service on a private PostgreSQL
// (testenv.StartPostgres): the lock clients of every row on the postgres lock backend, and
// beside them task pickers on the postgres task backend (some abandoning every lease, so that
// expired leases are recovered all along) and ID drawers whose segments and
// snowflake worker-id leases live there (--id-store postgres). The fault hits all three at
// once; after the row, the side load is checked: no task leased to two workers at once, none
// acked twice, no ID issued twice, each drawer's IDs strictly increasing.

// pgChaosTasks is how many tasks the pickers' pool starts with: more than they get through in
// a row, so that a pick finds one whenever the backend answers.
const pgChaosTasks = 2000

// pgChaosAbandoned is how many tasks the abandoning pickers cycle through: picked, never
// acked, picked again once the lease ran out, and so on, so that recovery runs all along.
const pgChaosAbandoned = 4

// pgChaosTaskTTL is the pickers' lease: longer than a pick's work, short enough that leases
// orphaned by the fault (an Ack that failed) come back within the row.
const pgChaosTaskTTL = 2 * time.Second

// postgresArgs are the serve flags that put every service on p.
func postgresArgs(p *testenv.PostgresProcess) []string {
	return []string{"--postgres-url", p.URL(), "--id-store", "postgres"}
}

// postgresRestart kills the private PostgreSQL (postmaster and backends, SIGKILL) mid-run and
// starts it again 1s later on the same data directory: crash recovery, every pooled
// connection broken.
func postgresRestart(t *testing.T) ([]string, chaosFaultFunc) {
	pg := testenv.StartPostgres(t)
	return postgresArgs(pg), func(r *chaosRun) chaosFault {
		side := startPgSideLoad(r)
		time.Sleep(chaosPreFault)
		side.mark("fault")
		at := r.rec.now()
		pg.Kill()
		time.Sleep(time.Second)
		began := time.Now()
		pg.Start()
		side.mark("healed")
		return chaosFault{at: at, healed: r.rec.now(), excused: true,
			note: fmt.Sprintf("postgres killed (SIGKILL, all processes), 1s down, recovered in %v", time.Since(began).Round(time.Millisecond))}
	}
}

// postgresTerminate ends coord's connections with pg_terminate_backend under load, as a
// failover or a DBA does: first all of them, then for 2s every 20ms those running a
// statement or inside a transaction. The calls on them fail, and the service must ride it
// out on fresh connections while the server stays up.
func postgresTerminate(t *testing.T) ([]string, chaosFaultFunc) {
	pg := testenv.StartPostgres(t)
	return postgresArgs(pg), func(r *chaosRun) chaosFault {
		side := startPgSideLoad(r)
		time.Sleep(chaosPreFault)
		side.mark("fault")
		at := r.rec.now()
		var killed, busy int
		for end, first := time.Now().Add(2*time.Second), true; time.Now().Before(end); first = false {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n, b, err := pg.TerminateBackends(ctx, "coordkit", !first)
			cancel()
			if err != nil {
				r.t.Errorf("pg_terminate_backend: %v", err)
			}
			killed, busy = killed+n, busy+b
			time.Sleep(20 * time.Millisecond)
		}
		side.mark("healed")
		if busy == 0 {
			r.t.Errorf("none of the %d terminated connections was running a statement or in a transaction: the row attacked nothing", killed)
		}
		return chaosFault{at: at, healed: r.rec.now(), served: true,
			note: fmt.Sprintf("pg_terminate_backend for 2s: %d connections ended, %d of them mid-statement or mid-transaction", killed, busy)}
	}
}

// pgSideLoad is the task pickers and ID drawers of a PostgreSQL row.
type pgSideLoad struct {
	r    *chaosRun
	pool string
	tag  string
	wg   sync.WaitGroup

	mu      sync.Mutex
	leases  []pgLease
	ids     map[idgenv1.Mode][][]int64 // per drawer, in issue order
	marks   []string
	pickErr atomic.Int64
	ackErr  atomic.Int64
	idErr   atomic.Int64
}

// pgLease is one task lease a picker got, and what became of it.
type pgLease struct {
	id       string
	token    uint64
	returned time.Time // when Pick returned it
	expires  time.Time // the expiry Pick reported
	acked    bool      // its Ack succeeded
}

// startPgSideLoad puts the pool's tasks and creates the ID tag through the first instance,
// starts two pickers and two drawers (segment, snowflake) per instance, and registers the
// checks to run once the row's clients stopped.
func startPgSideLoad(r *chaosRun) *pgSideLoad {
	t := r.t
	s := &pgSideLoad{r: r, pool: r.keys[0] + ":pool", tag: r.keys[0] + ":ids", ids: map[idgenv1.Mode][][]int64{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for from := 0; from < pgChaosTasks; from += 1000 {
		var tasks []*taskpickv1.NewTask
		for i := from; i < min(from+1000, pgChaosTasks); i++ {
			tasks = append(tasks, &taskpickv1.NewTask{Id: fmt.Sprintf("t%05d", i)})
		}
		if _, err := r.clients[0].Tasks().Put(ctx, &taskpickv1.PutRequest{Backend: "postgres", Pool: s.pool, Tasks: tasks}); err != nil {
			t.Fatalf("put the side load's tasks: %v", err)
		}
	}
	var abandoned []*taskpickv1.NewTask
	for i := range pgChaosAbandoned {
		abandoned = append(abandoned, &taskpickv1.NewTask{Id: fmt.Sprintf("abandoned-%d", i), MaxAttempts: 1000})
	}
	if _, err := r.clients[0].Tasks().Put(ctx, &taskpickv1.PutRequest{Backend: "postgres", Pool: s.pool + ":abandoned", Tasks: abandoned}); err != nil {
		t.Fatalf("put the side load's abandoned tasks: %v", err)
	}
	if _, err := r.clients[0].IDService().CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: s.tag, Step: 200}); err != nil {
		t.Fatalf("create the side load's ID tag: %v", err)
	}
	for i := range r.clients {
		for range 2 {
			s.wg.Go(func() { s.pick(i, s.pool, true) })
		}
		s.wg.Go(func() { s.pick(i, s.pool+":abandoned", false) })
		for _, mode := range []idgenv1.Mode{idgenv1.Mode_MODE_SEGMENT, idgenv1.Mode_MODE_SNOWFLAKE} {
			s.mu.Lock()
			d := len(s.ids[mode])
			s.ids[mode] = append(s.ids[mode], nil)
			s.mu.Unlock()
			s.wg.Go(func() { s.draw(i, mode, d) })
		}
	}
	// Cleanups run last first: this one runs when the row's function returned (its clients
	// stopped, r.ctx cancelled), before the instances and PostgreSQL are stopped.
	t.Cleanup(func() {
		s.wg.Wait()
		s.check()
	})
	return s
}

// mark notes a moment of the fault in the summary.
func (s *pgSideLoad) mark(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marks = append(s.marks, fmt.Sprintf("%s@%d leases", what, len(s.leases)))
}

// pick leases one task of pool at a time through instance i, works on it for a few
// milliseconds and acks it (unless not ack: then it abandons the lease), until the row
// stops. Failures (the backend down) are counted and retried.
func (s *pgSideLoad) pick(i int, pool string, ack bool) {
	tasks := s.r.clients[i].Tasks()
	for s.r.ctx.Err() == nil {
		res, err := tasks.Pick(s.r.ctx, &taskpickv1.PickRequest{Backend: "postgres", Pool: pool, Count: 1,
			Ttl: durationpb.New(pgChaosTaskTTL), Wait: durationpb.New(time.Second)})
		returned := time.Now()
		if err != nil {
			if s.r.ctx.Err() == nil {
				s.pickErr.Add(1)
				sleepCtx(s.r.ctx, 50*time.Millisecond)
			}
			continue
		}
		for _, lt := range res.GetTasks() {
			l := pgLease{id: lt.GetId(), token: lt.GetLeaseToken(), returned: returned, expires: lt.GetExpiresAt().AsTime()}
			sleepCtx(s.r.ctx, 5*time.Millisecond)
			if !ack {
				s.mu.Lock()
				s.leases = append(s.leases, l)
				s.mu.Unlock()
				continue
			}
			// The Ack runs to its end even when the row stops: an unknown outcome would
			// leave the check guessing.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := tasks.Ack(ctx, &taskpickv1.AckRequest{Backend: "postgres", Pool: pool, Id: l.id,
				LeaseToken: l.token, LeaseSecret: lt.GetLeaseSecret()})
			cancel()
			l.acked = err == nil
			if err != nil {
				s.ackErr.Add(1)
			}
			s.mu.Lock()
			s.leases = append(s.leases, l)
			s.mu.Unlock()
		}
		sleepCtx(s.r.ctx, 25*time.Millisecond) // at most ~30 picks a second each: the pool lasts the row
	}
}

// draw takes IDs of mode (tag s.tag for segments) through instance i, 20 a call, into drawer
// d's list, until the row stops.
func (s *pgSideLoad) draw(i int, mode idgenv1.Mode, d int) {
	c := s.r.clients[i].IDService()
	for s.r.ctx.Err() == nil {
		ids, err := nextIDs(s.r.ctx, c, mode, s.tag, 20)
		if err != nil {
			if s.r.ctx.Err() == nil {
				s.idErr.Add(1)
				sleepCtx(s.r.ctx, 50*time.Millisecond)
			}
			continue
		}
		s.mu.Lock()
		s.ids[mode][d] = append(s.ids[mode][d], ids...)
		s.mu.Unlock()
		sleepCtx(s.r.ctx, 10*time.Millisecond)
	}
}

// check: no task was leased while an earlier lease of it was still promised (its reported
// expiry not reached, and it not acked), a task acked once picked again, or acked twice; no
// ID issued twice in a mode; each drawer's IDs strictly increasing.
func (s *pgSideLoad) check() {
	t := s.r.t
	s.mu.Lock()
	defer s.mu.Unlock()
	byTask := map[string][]pgLease{}
	for _, l := range s.leases {
		byTask[l.id] = append(byTask[l.id], l)
	}
	var doublePicks, doubleAcks, redone int
	for id, ls := range byTask {
		slices.SortFunc(ls, func(a, b pgLease) int { return cmp.Compare(a.token, b.token) })
		acks := 0
		for k, l := range ls {
			if l.acked {
				acks++
			}
			if k == 0 {
				continue
			}
			redone++
			prev := ls[k-1]
			switch {
			case l.token == prev.token:
				doublePicks++
				t.Errorf("task %s: lease token %d handed out twice", id, l.token)
			case prev.acked:
				doublePicks++
				t.Errorf("task %s: picked again (token %d) after its lease %d was acked", id, l.token, prev.token)
			case l.returned.Before(prev.expires):
				doublePicks++
				t.Errorf("task %s: lease %d picked at %v, before lease %d's reported expiry %v",
					id, l.token, l.returned.Format(time.StampMicro), prev.token, prev.expires.Format(time.StampMicro))
			}
		}
		if acks > 1 {
			doubleAcks++
			t.Errorf("task %s acked %d times", id, acks)
		}
	}
	summary := ""
	for _, mode := range []idgenv1.Mode{idgenv1.Mode_MODE_SEGMENT, idgenv1.Mode_MODE_SNOWFLAKE} {
		var all []int64
		for d, ids := range s.ids[mode] {
			if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
				t.Errorf("%v drawer %d: IDs not strictly increasing", mode, d)
			}
			all = append(all, ids...)
		}
		slices.Sort(all)
		dups := len(all) - len(slices.Compact(slices.Clone(all)))
		if dups > 0 {
			t.Errorf("%v: %d IDs issued twice", mode, dups)
		}
		if len(all) == 0 {
			t.Errorf("%v: no ID drawn: the side load exercised nothing", mode)
		}
		summary += fmt.Sprintf(" %s=%d dup=%d", modeName(mode), len(all), dups)
	}
	if len(s.leases) < 20 {
		t.Errorf("only %d task leases: the side load exercised too little", len(s.leases))
	}
	if redone < pgChaosAbandoned {
		t.Errorf("only %d tasks picked again after their lease ran out: recovery was hardly exercised", redone)
	}
	t.Logf("%s side load: tasks picked=%d (%d tasks, %d re-picks) double-picks=%d double-acks=%d; ids%s; errors pick=%d ack=%d id=%d; %v",
		s.r.row.name, len(s.leases), len(byTask), redone, doublePicks, doubleAcks, summary,
		s.pickErr.Load(), s.ackErr.Load(), s.idErr.Load(), s.marks)
}

// modeName is the short name of an ID mode for the summary.
func modeName(m idgenv1.Mode) string {
	switch m {
	case idgenv1.Mode_MODE_SEGMENT:
		return "segment"
	case idgenv1.Mode_MODE_SNOWFLAKE:
		return "snowflake"
	}
	return strconv.Itoa(int(m))
}
