// Package redistask is the task-pick backend on Redis: every operation is one Lua script, so
// it is atomic, and all of a pool's keys share one hash slot, so the scripts run unchanged on
// Redis Cluster.
//
// Key layout, with T a hash tag that lands in the pool's slot:
//
//	<prefix>:{T}:ready:<pool>    ready tasks by priority (score -priority), ties by ready time
//	<prefix>:{T}:fifo:<pool>     the same tasks by the time they became available
//	<prefix>:{T}:delayed:<pool>  tasks waiting for their run_at (score)
//	<prefix>:{T}:leased:<pool>   leased tasks by lease end: what the sweep recovers
//	<prefix>:{T}:dead:<pool>     dead tasks by time of death
//	<prefix>:{T}:done:<pool>     acked tasks kept for the retention, by purge time
//	<prefix>:{T}:seq:<pool>      a counter that orders tasks that became ready in one ms
//	<prefix>:{T}:reg:<pool>      set while the pool is in the pools hash
//	<prefix>:{T}:settings:<pool> the pool's settings hash (paused, retry policy, max attempts)
//	<prefix>:{T}:cancelled:<pool> cancelled tasks kept for the retention, by purge time
//	<prefix>:{T}:task:<pool>\0<id>  the task hash
//	<prefix>:{T}:task:<pool>\0\0<key>  a unique key: its scope and holder (see putScript)
//	<prefix>:pools               pool -> registration generation: the pools a sweep visits
//
// Tasks live in exactly one of ready (both sets), delayed, leased, dead, done or cancelled. Redis's own
// clock (TIME, in a script) decides lease ends and due times. A pool is in the pools hash while
// it has leased or done tasks; the sweep drops it when it has none, conditional on the
// generation it read, so a pool registered again meanwhile is never lost.
package redistask

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisslot"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/services/taskpick"
)

// DefaultPrefix starts every key.
const DefaultPrefix = "coordkit:task"

// Config configures a Backend.
type Config struct {
	// Prefix starts every key; default DefaultPrefix. It must not contain braces.
	Prefix string
	// Retention keeps acked tasks as done for this long; 0 deletes them at Ack.
	Retention time.Duration
	// Scripts runs the scripts, which are every operation but the pools hash's bookkeeping
	// (HINCRBY, HGETALL on rdb); default rdb itself. redisconf.Pipelined(rdb) sends the
	// scripts of concurrent calls (a Batch's operations, many workers' Acks) together, one
	// round trip for all. No script blocks (a waiting Pick waits in the service, not in
	// Redis), so none holds up the others of its pipeline.
	Scripts redis.Scripter
}

// Backend implements taskpick.Backend on Redis.
type Backend struct {
	rdb     redis.UniversalClient
	scripts redis.Scripter
	prefix  string
	cfg     Config
}

var _ taskpick.Backend = (*Backend)(nil)

// New returns a backend on rdb; the caller keeps ownership of rdb.
func New(rdb redis.UniversalClient, cfg Config) *Backend {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	scripts := cfg.Scripts
	if scripts == nil {
		scripts = rdb
	}
	return &Backend{rdb: rdb, scripts: scripts, prefix: cfg.Prefix, cfg: cfg}
}

// Close implements taskpick.Backend; the client is the caller's.
func (b *Backend) Close() error { return nil }

// keys returns the pool's keys (KEYS of every script) and the task-key prefix (ARGV[1]).
func (b *Backend) keys(pool string) ([]string, string) {
	base := b.prefix + ":{" + redisslot.Tag(redisslot.Of(pool)) + "}:"
	ks := make([]string, 0, 10)
	for _, k := range []string{"ready:", "fifo:", "delayed:", "leased:", "dead:", "done:", "seq:", "reg:", "settings:", "cancelled:"} {
		ks = append(ks, base+k+pool)
	}
	return ks, base + "task:" + pool + "\x00"
}

func (b *Backend) poolsKey() string { return b.prefix + ":pools" }

func (b *Backend) fail(ctx context.Context, err error) error {
	return server.Unavailable(ctx, taskpick.ErrUnavailable, "redis", err)
}

func (b *Backend) run(ctx context.Context, s *redis.Script, pool string, args ...any) (any, error) {
	keys, p := b.keys(pool)
	v, err := s.Run(ctx, b.scripts, keys, append([]any{p}, args...)...).Result()
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	return v, nil
}

// register adds pool to the pools hash after a script said it had left it.
func (b *Backend) register(ctx context.Context, pool string, flag int64) error {
	if flag != 1 {
		return nil
	}
	if err := b.rdb.HIncrBy(ctx, b.poolsKey(), pool, 1).Err(); err != nil {
		return b.fail(ctx, err)
	}
	return nil
}

// Put implements taskpick.Backend.
func (b *Backend) Put(ctx context.Context, pool string, tasks []taskpick.NewTask) ([]taskpick.PutResult, error) {
	args := make([]any, 0, 8*len(tasks))
	for _, t := range tasks {
		args = append(args, t.ID, t.Payload, t.Priority, ceilMillis(t.Delay), t.MaxAttempts,
			t.UniqueKey, int(t.UniqueScope), ceilMillis(t.UniquePeriod))
	}
	v, err := b.run(ctx, putScript, pool, args...)
	if err != nil {
		return nil, err
	}
	vals := v.([]any)
	out := make([]taskpick.PutResult, len(vals)/3)
	for i := range out {
		switch toInt(vals[3*i]) {
		case 1:
			out[i].Created = true
		case 2:
			out[i] = taskpick.PutResult{Duplicate: true, HolderID: str(vals[3*i+1]), HolderState: taskpick.State(toInt(vals[3*i+2]))}
		}
	}
	return out, nil
}

// orderArg names an order for pickScript.
func orderArg(o taskpick.Order) string {
	switch o {
	case taskpick.Priority:
		return "priority"
	case taskpick.Random:
		return "random"
	}
	return "fifo"
}

// Pick implements taskpick.Backend.
func (b *Backend) Pick(ctx context.Context, pool string, spec taskpick.PickSpec) (taskpick.Picked, error) {
	args := make([]any, 0, 4+spec.N)
	args = append(args, spec.N, ceilMillis(spec.TTL), orderArg(spec.Order), spec.MaxBytes)
	for _, d := range spec.Digests[:spec.N] {
		args = append(args, d)
	}
	v, err := b.run(ctx, pickScript, pool, args...)
	if err != nil {
		return taskpick.Picked{}, err
	}
	vals := v.([]any)
	var out taskpick.Picked
	if due := toInt(vals[1]); due >= 0 {
		out.NextDue = time.UnixMilli(due)
	}
	out.Full = toInt(vals[2]) == 1
	out.Paused = toInt(vals[3]) == 1
	out.Limited = toInt(vals[4]) == 1
	for i := 5; i+5 < len(vals); i += 6 {
		out.Tasks = append(out.Tasks, taskpick.LeasedTask{
			ID: vals[i].(string), Payload: []byte(vals[i+1].(string)), Priority: int32(toInt(vals[i+2])),
			Token: uint64(toInt(vals[i+3])), Attempt: uint32(toInt(vals[i+4])), MaxAttempts: uint32(toInt(vals[i+5])),
		})
	}
	if err := b.register(ctx, pool, vals[0].(int64)); err != nil {
		// The tasks are leased; without registration a crash of their worker would go
		// unrecovered until the pool is registered again, so report the failure.
		return taskpick.Picked{}, err
	}
	return out, nil
}

// leaseResult maps a script's held value.
func leaseResult(h int64) error {
	switch h {
	case 0:
		return taskpick.ErrNotFound
	case -1:
		return taskpick.ErrStaleLease
	}
	return nil
}

// Ack implements taskpick.Backend.
func (b *Backend) Ack(ctx context.Context, pool, id string, lease taskpick.Lease) error {
	v, err := b.run(ctx, ackScript, pool, id, strconv.FormatUint(lease.Token, 10), lease.Digest, b.cfg.Retention.Milliseconds())
	if err != nil {
		return err
	}
	vals := v.([]any)
	if err := leaseResult(vals[0].(int64)); err != nil {
		return err
	}
	return b.register(ctx, pool, vals[1].(int64))
}

// Extend implements taskpick.Backend.
func (b *Backend) Extend(ctx context.Context, pool, id string, lease taskpick.Lease, ttl time.Duration) error {
	v, err := b.run(ctx, extendScript, pool, id, strconv.FormatUint(lease.Token, 10), lease.Digest, ceilMillis(ttl))
	if err != nil {
		return err
	}
	return leaseResult(v.(int64))
}

// Nack implements taskpick.Backend.
func (b *Backend) Nack(ctx context.Context, pool, id string, lease taskpick.Lease, retryAfter time.Duration, reason string) (bool, error) {
	ms := int64(-1)
	if retryAfter != taskpick.PoolPolicy {
		ms = ceilMillis(retryAfter)
	}
	v, err := b.run(ctx, nackScript, pool, id, strconv.FormatUint(lease.Token, 10), lease.Digest, ms, reason, rand.Float64())
	if err != nil {
		return false, err
	}
	h := v.(int64)
	return h == 2, leaseResult(h)
}

// Get implements taskpick.Backend.
func (b *Backend) Get(ctx context.Context, pool, id string) (taskpick.Task, error) {
	v, err := b.run(ctx, getScript, pool, id)
	if err != nil {
		return taskpick.Task{}, err
	}
	vals := v.([]any)
	if len(vals) == 0 {
		return taskpick.Task{}, taskpick.ErrNotFound
	}
	now := toInt(vals[0])
	st := toInt(vals[3])
	t := taskFrom(id, vals[1], vals[2], vals[4], vals[5], vals[6], vals[7], vals[8], vals[9])
	switch st {
	case 1:
		t.State = taskpick.Available
		if t.RunAt.UnixMilli() > now {
			t.State = taskpick.Delayed
		}
	case 2:
		t.State = taskpick.Leased
	case 3:
		t.State = taskpick.Dead
	case 4:
		t.State = taskpick.Done
	case 5:
		t.State = taskpick.Cancelled
	}
	return t, nil
}

// taskFrom builds a Task from a script's replies (state set by the caller).
func taskFrom(id string, p, pr, at, ma, f, r, ra, e any) taskpick.Task {
	return taskpick.Task{
		ID: id, Payload: []byte(str(p)), Priority: int32(toInt(pr)), Attempt: uint32(toInt(at)),
		MaxAttempts: uint32(toInt(ma)), Failures: uint32(toInt(f)), Recoveries: uint32(toInt(r)),
		RunAt: time.UnixMilli(toInt(ra)), LastError: str(e),
	}
}

// Stats implements taskpick.Backend.
func (b *Backend) Stats(ctx context.Context, pool string) (taskpick.Stats, error) {
	v, err := b.run(ctx, statsScript, pool)
	if err != nil {
		return taskpick.Stats{}, err
	}
	vals := v.([]any)
	s := taskpick.Stats{
		Now: time.UnixMilli(toInt(vals[0])), Available: uint64(toInt(vals[1])), Delayed: uint64(toInt(vals[2])),
		Leased: uint64(toInt(vals[3])), Dead: uint64(toInt(vals[4])), Done: uint64(toInt(vals[5])),
		Cancelled: uint64(toInt(vals[7])),
	}
	if o := toInt(vals[6]); o >= 0 && s.Available > 0 {
		s.OldestAvailable = time.UnixMilli(o)
	}
	return s, nil
}

// ListDead implements taskpick.Backend.
func (b *Backend) ListDead(ctx context.Context, pool string, limit, maxBytes int) ([]taskpick.Task, uint64, bool, error) {
	v, err := b.run(ctx, listDeadScript, pool, limit, maxBytes)
	if err != nil {
		return nil, 0, false, err
	}
	vals := v.([]any)
	var out []taskpick.Task
	for i := 2; i+8 < len(vals); i += 9 {
		t := taskFrom(str(vals[i]), vals[i+1], vals[i+2], vals[i+3], vals[i+4], vals[i+5], vals[i+6], vals[i+7], vals[i+8])
		t.State = taskpick.Dead
		out = append(out, t)
	}
	return out, uint64(toInt(vals[0])), toInt(vals[1]) == 1, nil
}

// Requeue implements taskpick.Backend.
func (b *Backend) Requeue(ctx context.Context, pool string, ids []string) ([]bool, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	v, err := b.run(ctx, requeueScript, pool, args...)
	if err != nil {
		return nil, err
	}
	vals := v.([]any)
	out := make([]bool, len(vals))
	for i, x := range vals {
		out[i] = x.(int64) == 1
	}
	return out, nil
}

// expiredMsg is the last error of a task whose last attempt's lease ran out.
const expiredMsg = "lease expired on the last attempt (worker crashed or hung)"

// unregisterScript drops a pool from the pools hash if its generation is still the one the
// sweep read: KEYS[1] pools, ARGV[1] pool, ARGV[2] generation.
var unregisterScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
`)

// Sweep implements taskpick.Backend: one script per registered pool.
func (b *Backend) Sweep(ctx context.Context, limit int) ([]taskpick.Recovered, error) {
	pools, err := b.rdb.HGetAll(ctx, b.poolsKey()).Result()
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	var out []taskpick.Recovered
	for pool, gen := range pools {
		v, err := b.run(ctx, sweepScript, pool, limit, expiredMsg)
		if err != nil {
			return out, err
		}
		vals := v.([]any)
		r := taskpick.Recovered{Pool: pool, Available: int(toInt(vals[0])), Dead: int(toInt(vals[1])), Due: int(toInt(vals[2]))}
		if r.Available > 0 || r.Dead > 0 || r.Due > 0 {
			out = append(out, r)
		}
		if toInt(vals[3]) == 1 {
			if err := unregisterScript.Run(ctx, b.scripts, []string{b.poolsKey()}, pool, gen).Err(); err != nil {
				return out, b.fail(ctx, err)
			}
		}
	}
	return out, nil
}

// toInt reads an integer reply, which Lua may have sent as a number or a string.
func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// ceilMillis is d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
