package snowflake_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// leaseCase is one worker-id store under test: store returns a fresh, isolated store (or a
// shared one where isolation is impossible, as the MySQL table) and steal takes a worker id
// away behind its holder's back, as another process that wrongly believed it free would.
type leaseCase struct {
	name  string
	store func(t *testing.T) (s workerid.Store, steal func(t *testing.T, id int))
}

var leaseStores = []leaseCase{
	{name: "redis", store: func(t *testing.T) (workerid.Store, func(*testing.T, int)) {
		rdb := testenv.Redis(t, "")
		prefix := testenv.Prefix(t) + ":"
		testenv.CleanRedis(t, rdb, prefix)
		return workerid.NewRedis(rdb, prefix), func(t *testing.T, id int) {
			noErr(t, rdb.Set(context.Background(), prefix+"{workers}:"+itoa(id), "thief", time.Minute).Err())
		}
	}},
	{name: "mysql", store: func(t *testing.T) (workerid.Store, func(*testing.T, int)) {
		db, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), 8)
		noErr(t, err)
		t.Cleanup(func() { db.Close() })
		return sqlStore(t, db)
	}},
	{name: "sqlite", store: func(t *testing.T) (workerid.Store, func(*testing.T, int)) {
		db, err := sqldb.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "ids.db"))
		noErr(t, err)
		t.Cleanup(func() { db.Close() })
		return sqlStore(t, db)
	}},
	{name: "postgres", store: func(t *testing.T) (workerid.Store, func(*testing.T, int)) {
		db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: 8})
		noErr(t, err)
		t.Cleanup(func() { db.Close() })
		return sqlStore(t, db)
	}},
}

func sqlStore(t *testing.T, db *sqldb.DB) (workerid.Store, func(*testing.T, int)) {
	s, err := workerid.NewSQL(context.Background(), db)
	noErr(t, err)
	return s, func(t *testing.T, id int) {
		_, err := db.Exec("UPDATE coordkit_idgen_workers SET owner = 'thief', expires_at = "+db.Dialect.NowMillis+" + 60000 WHERE worker_id = ?", id)
		noErr(t, err)
		t.Cleanup(func() {
			// The thief issued nothing: clear the bound its victim recorded, or parallel tests
			// sharing the MySQL table would find the id too far ahead of their clocks.
			db.Exec("UPDATE coordkit_idgen_workers SET owner = '', expires_at = 0, last_ms = 0 WHERE worker_id = ? AND owner = 'thief'", id)
		})
	}
}

func start(t *testing.T, cfg snowflake.Config) *snowflake.Generator {
	t.Helper()
	g, err := snowflake.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func TestLeasesAreExclusive(t *testing.T) {
	t.Parallel()
	for _, lc := range leaseStores {
		t.Run(lc.name, func(t *testing.T) {
			t.Parallel()
			store, _ := lc.store(t)
			held := map[int]bool{}
			var gens []*snowflake.Generator
			for range 6 {
				g := start(t, snowflake.Config{Store: store})
				id, ok := g.Worker()
				if !ok || held[id] {
					t.Fatalf("worker id %d (held %v) leased twice among %v", id, ok, held)
				}
				held[id] = true
				gens = append(gens, g)
			}
			// A closed instance's id is free again and the lowest, so the next one reuses it.
			freed, _ := gens[2].Worker()
			noErr(t, gens[2].Close())
			g := start(t, snowflake.Config{Store: store})
			if id, _ := g.Worker(); lc.name != "mysql" && id != freed {
				t.Fatalf("new instance leased %d, want the freed %d", id, freed)
			} else if id != freed && held[id] {
				t.Fatalf("new instance leased %d, which is held", id)
			}
		})
	}
}

func TestLostLeaseStopsIssuing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, lc := range leaseStores {
		t.Run(lc.name, func(t *testing.T) {
			t.Parallel()
			store, steal := lc.store(t)
			g := start(t, snowflake.Config{Store: store})
			_, err := g.Next(ctx, 10)
			noErr(t, err)
			id, _ := g.Worker()
			steal(t, id)
			if err := g.Renew(ctx); !errors.Is(err, snowflake.ErrLeaseLost) {
				t.Fatalf("Renew after the lease was taken = %v, want ErrLeaseLost", err)
			}
			if _, err := g.Next(ctx, 1); !errors.Is(err, snowflake.ErrLeaseLost) {
				t.Fatalf("Next after the lease was lost = %v, want ErrLeaseLost", err)
			}
			// The next renewal leases another id and issuing resumes.
			noErr(t, g.Renew(ctx))
			if nid, ok := g.Worker(); !ok || nid == id {
				t.Fatalf("after re-leasing worker = %d (held %v), want a held id other than the stolen %d", nid, ok, id)
			}
			_, err = g.Next(ctx, 10)
			noErr(t, err)
		})
	}
}

func TestUnrenewedLeaseStopsIssuing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy := testenv.NewProxy(t, testenv.RedisAddr())
	rdb := testenv.Redis(t, proxy.Addr())
	prefix := testenv.Prefix(t) + ":"
	testenv.CleanRedis(t, testenv.Redis(t, ""), prefix)
	g := start(t, snowflake.Config{Store: workerid.NewRedis(rdb, prefix), LeaseTTL: 600 * time.Millisecond})
	_, err := g.Next(ctx, 1)
	noErr(t, err)
	proxy.Cut() // renewals fail from now on
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := g.Next(ctx, 1)
		if errors.Is(err, snowflake.ErrLeaseLost) {
			break
		}
		noErr(t, err)
		if time.Now().After(deadline) {
			t.Fatal("still issuing 2s after the store became unreachable, with a 600ms lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
	proxy.Restore()
}

func TestClockRollbackAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		ahead   time.Duration // how far the previous holder's clock was ahead
		wantErr bool
	}{
		{name: "small rollback waits", ahead: 1500 * time.Millisecond},
		{name: "large rollback refuses", ahead: 10 * time.Second, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db, err := sqldb.OpenSQLite(ctx, filepath.Join(t.TempDir(), "ids.db"))
			noErr(t, err)
			t.Cleanup(func() { db.Close() })
			store, err := workerid.NewSQL(ctx, db)
			noErr(t, err)
			ahead := func() time.Time { return time.Now().Add(tt.ahead) }
			prev := start(t, snowflake.Config{Store: store, Clock: ahead})
			last, err := prev.Next(ctx, 100)
			noErr(t, err)
			noErr(t, prev.Close()) // records the last millisecond and frees id 0

			begin := time.Now()
			g, err := snowflake.Start(ctx, snowflake.Config{Store: store})
			if tt.wantErr {
				if !errors.Is(err, snowflake.ErrClockBackwards) || !strings.Contains(err.Error(), "worker id 0") {
					t.Fatalf("Start = %v, want ErrClockBackwards naming worker id 0", err)
				}
				return
			}
			noErr(t, err)
			t.Cleanup(func() { g.Close() })
			if waited := time.Since(begin); waited < tt.ahead-200*time.Millisecond {
				t.Fatalf("Start returned after %v, want a wait of about %v", waited, tt.ahead)
			}
			ids, err := g.Next(ctx, 1)
			noErr(t, err)
			if ids[0] <= last[len(last)-1] {
				t.Fatalf("first ID %d after the restart is not above the previous holder's last %d", ids[0], last[len(last)-1])
			}
		})
	}
}

func TestClockRollbackWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		back    time.Duration
		wantErr bool
	}{
		{name: "small rollback waits", back: 300 * time.Millisecond},
		{name: "large rollback fails", back: 6 * time.Second, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var offset time.Duration
			worker := 7
			g := start(t, snowflake.Config{WorkerID: &worker, Clock: func() time.Time { return time.Now().Add(offset) }})
			before, err := g.Next(ctx, 5)
			noErr(t, err)
			offset = -tt.back // Next runs on this goroutine only, so no race on offset
			begin := time.Now()
			after, err := g.Next(ctx, 5)
			if tt.wantErr {
				if !errors.Is(err, snowflake.ErrClockBackwards) {
					t.Fatalf("Next after a %v rollback = %v, want ErrClockBackwards", tt.back, err)
				}
				return
			}
			noErr(t, err)
			if waited := time.Since(begin); waited < tt.back-50*time.Millisecond {
				t.Fatalf("Next returned after %v, want a wait of about %v", waited, tt.back)
			}
			if after[0] <= before[len(before)-1] {
				t.Fatalf("ID %d after the rollback is not above %d", after[0], before[len(before)-1])
			}
		})
	}
}

func TestBatchSpansMilliseconds(t *testing.T) {
	t.Parallel()
	worker := snowflake.MaxWorker
	g := start(t, snowflake.Config{WorkerID: &worker})
	ids, err := g.Next(context.Background(), 10000)
	noErr(t, err)
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids[%d] = %d is not above %d", i, ids[i], ids[i-1])
		}
	}
	d, err := snowflake.Decode(ids[len(ids)-1], time.Now())
	noErr(t, err)
	if d.Worker != worker {
		t.Fatalf("decoded worker %d, want %d", d.Worker, worker)
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// AppendRanges hands out a batch as runs of consecutive IDs, one per millisecond it spans:
// each run within one millisecond of the worker, each above the one before.
func TestAppendRangesAreMillisecondRuns(t *testing.T) {
	t.Parallel()
	worker := 3
	g := start(t, snowflake.Config{WorkerID: &worker})
	for _, n := range []int{1, 4096, 10000} {
		rs, err := g.AppendRanges(context.Background(), nil, n)
		noErr(t, err)
		total, prevEnd := 0, int64(0)
		for _, r := range rs {
			first, err := snowflake.Decode(r.Start, time.Now())
			noErr(t, err)
			last, err := snowflake.Decode(r.End-1, time.Now())
			noErr(t, err)
			if r.End <= r.Start || r.Start < prevEnd || !first.Time.Equal(last.Time) || first.Worker != worker || last.Worker != worker {
				t.Fatalf("n %d: run [%d, %d) after %d: from %+v to %+v; want a non-empty run of one millisecond of worker %d, above the last",
					n, r.Start, r.End, prevEnd, first, last, worker)
			}
			total += int(r.End - r.Start)
			prevEnd = r.End
		}
		if total != n {
			t.Fatalf("AppendRanges(%d) handed out %d IDs in %v", n, total, rs)
		}
	}
}

// Single IDs and batches as fast as several goroutines can ask: they use up millisecond
// after millisecond, wait for the next each time, and still never repeat or go back.
func TestSequenceOverflowAtFullSpeed(t *testing.T) {
	t.Parallel()
	worker := 9
	g := start(t, snowflake.Config{WorkerID: &worker})
	const workers, calls = 4, 400
	got := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var rs []snowflake.Range
			for c := range calls {
				n := 1
				if c%2 == 1 {
					n = 700 // with the others', enough to use up every millisecond
				}
				var err error
				if rs, err = g.AppendRanges(context.Background(), rs[:0], n); err != nil {
					t.Error(err)
					return
				}
				for _, r := range rs {
					for id := r.Start; id < r.End; id++ {
						got[w] = append(got[w], id)
					}
				}
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	perMs := map[int64]int{}
	full := 0
	for w, ids := range got {
		for i, id := range ids {
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("goroutine %d got %d after %d", w, id, ids[i-1])
			}
			if seen[id] {
				t.Fatalf("%d issued twice", id)
			}
			seen[id] = true
			ms := id >> (snowflake.WorkerBits + snowflake.SequenceBits)
			if perMs[ms]++; perMs[ms] == snowflake.MaxSequence+1 {
				full++
			}
		}
	}
	if full == 0 {
		t.Fatalf("%d IDs over %d milliseconds, none used up: the wait for the next millisecond went untested", len(seen), len(perMs))
	}
}

// A clock that steps back while a caller waits for the next millisecond (its sequence used
// up) is a rollback like any other: waited out, never an ID lower than one before it.
func TestClockRollbackDuringOverflowWait(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		offset time.Duration
	)
	worker := 11
	g := start(t, snowflake.Config{WorkerID: &worker, Clock: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(offset)
	}})
	time.AfterFunc(20*time.Millisecond, func() {
		mu.Lock()
		offset = -200 * time.Millisecond
		mu.Unlock()
	})
	var last int64
	begin := time.Now()
	for time.Since(begin) < 400*time.Millisecond {
		rs, err := g.AppendRanges(context.Background(), nil, 3000) // uses up milliseconds
		noErr(t, err)
		for _, r := range rs {
			if r.Start <= last {
				t.Fatalf("run from %d after %d", r.Start, last)
			}
			last = r.End - 1
		}
	}
}
