package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/testenv"
)

// idModes are the numeric ID modes: each promises unique IDs across instances and strictly
// increasing IDs per instance.
var idModes = []idgenv1.Mode{idgenv1.Mode_MODE_SNOWFLAKE, idgenv1.Mode_MODE_SEGMENT, idgenv1.Mode_MODE_REDIS_INCR}

// idBatch is how many IDs one Next asks for.
const idBatch = 100

// TestIDs draws IDs of every numeric mode concurrently from 3 coord instances sharing MySQL
// or PostgreSQL (segments, worker leases) and Redis (INCR blocks, or worker leases), while one instance is
// killed with SIGKILL and restarted and another is restarted gracefully. It attacks
// uniqueness across instances and restarts: no ID twice in any mode; each drawer's IDs
// strictly increase, also across its instance's restart; a restarted instance leases a
// snowflake worker id no live instance uses (after SIGKILL, not its old one, whose lease
// still runs) and hands out segment and Redis IDs above everything reserved before.
func TestIDs(t *testing.T) {
	t.Parallel()
	mysql := func(*testing.T) []string { return []string{"--mysql-dsn", testenv.MySQLDSN()} }
	postgres := func(t *testing.T) []string {
		return []string{"--postgres-url", testenv.PostgresURL(), "--postgres-schema", testenv.PostgresSchema(t)}
	}
	tests := []struct {
		name   string
		leases string
		store  func(*testing.T) []string
	}{
		{"sql-worker-leases", "sql", mysql},
		{"redis-worker-leases", "redis", mysql},
		{"postgres-sql-worker-leases", "sql", postgres},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runIDs(t, tt.leases, tt.store(t))
		})
	}
}

// drawer is one client that calls Next on one instance for one mode, again and again.
type drawer struct {
	in    int
	mode  idgenv1.Mode
	calls atomic.Int64
	errs  atomic.Int64

	mu  sync.Mutex
	ids []int64 // in issue order
	// restartedAt is len(ids) when its instance was down for a restart (-1: never), and
	// floor the least ID its restarted instance may issue: a restarted instance's segment
	// and Redis IDs are all above what was reserved before, not only the first one.
	restartedAt int
	floor       int64
}

func runIDs(t *testing.T, leases string, store []string) {
	ins := startCluster(t, 3, append(store, "--redis-addr", testenv.RedisAddr(),
		"--nats-url", testenv.NATSURL(), "--id-worker-leases", leases)...)
	tag := testenv.Prefix(t)
	admin := ins[0].Client().IDService()
	if _, err := admin.CreateTag(context.Background(), &idgenv1.CreateTagRequest{Tag: tag, Step: 500}); err != nil {
		t.Fatal(err)
	}
	rdb := testenv.Redis(t, "")
	t.Cleanup(func() {
		admin.DeleteTag(context.Background(), &idgenv1.DeleteTagRequest{Tag: tag}) //nolint:errcheck // a tombstone stays by design
		rdb.Del(context.Background(), "coordkit:idgen:tag:"+tag)
	})
	r := &idRun{t: t, ins: ins, tag: tag, leases: leases, extra: map[idgenv1.Mode][]int64{},
		redisCounter: func() string { return rdb.Get(context.Background(), "coordkit:idgen:tag:"+tag).Val() }}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range ins {
		c := ins[i].Client().IDService()
		for _, mode := range idModes {
			for range 2 {
				d := &drawer{in: i, mode: mode, restartedAt: -1}
				r.drawers = append(r.drawers, d)
				wg.Go(func() { r.draw(ctx, c, d) })
			}
		}
	}

	r.progress()
	r.restart(1, "SIGKILL", ins[1].Stop) // SIGKILL
	r.progress()
	r.restart(2, "graceful", func() {
		if err := ins[2].Terminate(10 * time.Second); err != nil {
			t.Error(err)
		}
	})
	r.progress()
	cancel()
	wg.Wait()
	r.check()
}

// idRun is one run of the scenario.
type idRun struct {
	t       *testing.T
	ins     []*instance
	tag     string
	leases  string
	drawers []*drawer
	extra   map[idgenv1.Mode][]int64 // IDs the restart checks drew
	// redisCounter reads the tag's Redis INCR counter: the highest ID reserved there.
	redisCounter func() string
}

// draw calls Next until ctx ends, retrying failures (its instance down) on the same instance.
func (r *idRun) draw(ctx context.Context, c idgenv1connect.IdServiceClient, d *drawer) {
	for ctx.Err() == nil {
		ids, err := nextIDs(ctx, c, d.mode, r.tag, idBatch)
		if err != nil {
			if ctx.Err() == nil {
				d.errs.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
			continue
		}
		d.mu.Lock()
		d.ids = append(d.ids, ids...)
		d.mu.Unlock()
		d.calls.Add(1)
		time.Sleep(5 * time.Millisecond) // a steady stream, not a flood: the IDs are all kept
	}
}

func nextIDs(ctx context.Context, c idgenv1connect.IdServiceClient, mode idgenv1.Mode, tag string, n uint32) ([]int64, error) {
	req := &idgenv1.NextRequest{Mode: mode, Count: n}
	if mode != idgenv1.Mode_MODE_SNOWFLAKE {
		req.Tag = tag
	}
	res, err := c.Next(ctx, req)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(res.GetIds()))
	for i, s := range res.GetIds() {
		if ids[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, fmt.Errorf("%v ID %q: %w", mode, s, err)
		}
	}
	if len(ids) != int(n) {
		return nil, fmt.Errorf("%v: %d IDs, asked for %d", mode, len(ids), n)
	}
	return ids, nil
}

// progress waits until every drawer of a running instance has made 10 more calls.
func (r *idRun) progress() {
	r.t.Helper()
	base := make([]int64, len(r.drawers))
	for i, d := range r.drawers {
		base[i] = d.calls.Load()
	}
	pollUntil(r.t, 30*time.Second, "10 more Next calls by every drawer", func() bool {
		for i, d := range r.drawers {
			if d.calls.Load() < base[i]+10 {
				return false
			}
		}
		return true
	})
}

// one draws one ID of mode from instance i for the checks; it joins the uniqueness check.
func (r *idRun) one(i int, mode idgenv1.Mode) int64 {
	r.t.Helper()
	ids, err := nextIDs(context.Background(), r.ins[i].Client().IDService(), mode, r.tag, 1)
	if err != nil {
		r.t.Fatalf("coord-%d: %v", i+1, err)
	}
	r.extra[mode] = append(r.extra[mode], ids[0])
	return ids[0]
}

// worker is the snowflake worker id instance i issues with now.
func (r *idRun) worker(i int) uint32 {
	r.t.Helper()
	id := r.one(i, idgenv1.Mode_MODE_SNOWFLAKE)
	res, err := r.ins[0].Client().IDService().Decode(context.Background(), &idgenv1.DecodeRequest{Id: strconv.FormatInt(id, 10)})
	if err != nil {
		r.t.Fatal(err)
	}
	return res.GetWorkerId()
}

// restart stops instance k with stop and starts it again, then checks what it hands out
// first: a worker id of its own, and segment and Redis IDs above all reserved before.
func (r *idRun) restart(k int, how string, stop func()) {
	t := r.t
	t.Helper()
	old := r.worker(k)
	stop()
	stopped := time.Now()
	tags, err := r.ins[0].Client().IDService().ListTags(context.Background(), &idgenv1.ListTagsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var segTop int64 // one past the highest segment ID any instance reserved
	for _, ts := range tags.GetTags() {
		if ts.GetTag() == r.tag {
			segTop = ts.GetMaxId()
		}
	}
	redTop, err := strconv.ParseInt(r.redisCounter(), 10, 64)
	if err != nil || segTop == 0 {
		t.Fatalf("before restarting coord-%d: segment max_id %d, Redis counter %v", k+1, segTop, err)
	}
	// The instance is down: what its drawers get from now on comes from the restarted process.
	for _, d := range r.drawers {
		if d.in != k || d.mode == idgenv1.Mode_MODE_SNOWFLAKE {
			continue
		}
		d.mu.Lock()
		d.restartedAt, d.floor = len(d.ids), segTop
		if d.mode == idgenv1.Mode_MODE_REDIS_INCR {
			d.floor = redTop + 1
		}
		d.mu.Unlock()
	}
	r.ins[k].Start()
	upAfter := time.Since(stopped) // the new process leased its worker id before this
	if id := r.one(k, idgenv1.Mode_MODE_SEGMENT); id < segTop {
		t.Errorf("coord-%d after a %s restart issued segment ID %d, below max_id %d reserved before: an old segment again", k+1, how, id, segTop)
	}
	if id := r.one(k, idgenv1.Mode_MODE_REDIS_INCR); id <= redTop {
		t.Errorf("coord-%d after a %s restart issued Redis ID %d, not above the counter %d", k+1, how, id, redTop)
	}
	w := r.worker(k)
	for i := range r.ins {
		if i != k && r.worker(i) == w {
			t.Errorf("coord-%d after a %s restart leased worker id %d, which coord-%d uses", k+1, how, w, i+1)
		}
	}
	// After SIGKILL the old lease runs until its ttl (10s) from its last renewal, at most a
	// third of the ttl before the kill: up to 6.7s after the kill the id is not free yet.
	if how == "SIGKILL" && w == old && upAfter < 5*time.Second {
		t.Errorf("coord-%d after SIGKILL leased its old worker id %d while that lease still ran", k+1, w)
	}
	t.Logf("coord-%d %s restart: worker id %d -> %d", k+1, how, old, w)
}

// check: per mode no ID twice, per drawer strictly increasing; only restarted instances
// failed calls.
func (r *idRun) check() {
	t := r.t
	perMode := map[idgenv1.Mode][]int64{}
	var restartErrs int64
	for _, d := range r.drawers {
		if !slices.IsSorted(d.ids) || len(slices.Compact(slices.Clone(d.ids))) != len(d.ids) {
			t.Errorf("coord-%d %v: IDs of one drawer not strictly increasing", d.in+1, d.mode)
		}
		if d.in == 0 && d.errs.Load() > 0 {
			t.Errorf("coord-%d (never restarted) %v: %d failed calls", d.in+1, d.mode, d.errs.Load())
		}
		if d.restartedAt >= 0 {
			var below []int64
			for _, id := range d.ids[d.restartedAt:] {
				if id < d.floor {
					below = append(below, id)
				}
			}
			if len(below) > 0 {
				t.Errorf("coord-%d %v after its restart issued %d IDs below %d, reserved before it (first %d): an old range again",
					d.in+1, d.mode, len(below), d.floor, below[0])
			}
		}
		restartErrs += d.errs.Load()
		perMode[d.mode] = append(perMode[d.mode], d.ids...)
	}
	summary := ""
	for _, mode := range idModes {
		all := append(perMode[mode], r.extra[mode]...)
		slices.Sort(all)
		var twice []int64
		for i := 1; i < len(all); i++ {
			if all[i] == all[i-1] {
				twice = append(twice, all[i])
			}
		}
		if len(twice) > 0 {
			t.Errorf("%v: %d IDs issued twice, first %v", mode, len(twice), twice[:min(len(twice), 5)])
		}
		summary += fmt.Sprintf(" %v %d;", mode, len(all))
	}
	t.Logf("ids per mode (worker leases on %s):%s %d calls failed while instances restarted", r.leases, summary, restartErrs)
}
