package snowflake_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
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
