package redistask

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisslot"
	"github.com/coordkit/coordkit/services/taskpick"
)

// Schedules live in the pool's slot, beside its tasks, so a fire and the task it puts are one
// script:
//
//	<prefix>:{T}:schnames:<pool>       the pool's schedule names (score 0, listed by name)
//	<prefix>:{T}:schdue:<pool>         running schedules by next fire (Unix ms)
//	<prefix>:{T}:sch:<pool>\0<name>    the schedule hash: s spec, z zone, p payload,
//	                                   pr priority, ma max attempts, mi missed, pa paused,
//	                                   lf last fire (ms, 0 before the first)
//	<prefix>:schedpools                pool -> generation: the pools a fire pass visits
//
// A schedule is in schdue while it runs and has a next tick. The pools hash is written before
// and after every PutSchedule's script, so a pool with schedules is always in it once a put
// returned; DeleteSchedule drops the pool when its last schedule went, conditional on the
// generation it read before, so a put meanwhile keeps it.

// schedKeys are the KEYS of every schedule script: the pool's keys (Layout.Keys), then its
// names, due set and the schedule's hash, the last three; and the task-key prefix (ARGV[1]).
func (b *Backend) schedKeys(pool, name string) ([]string, string) {
	ks, p := b.keys(pool)
	base := b.prefix + ":{" + redisslot.Tag(redisslot.Of(pool)) + "}:"
	return append(ks, base+"schnames:"+pool, base+"schdue:"+pool, base+"sch:"+pool+"\x00"+name), p
}

func (b *Backend) schedPoolsKey() string { return b.prefix + ":schedpools" }

func (b *Backend) runSched(ctx context.Context, c redis.Scripter, s *redis.Script, pool, name string, args ...any) *redis.Cmd {
	keys, p := b.schedKeys(pool, name)
	return s.Run(ctx, c, keys, append([]any{p, name}, args...)...)
}

// schedPrelude reads schedules: the last three KEYS are names, due and the schedule; ARGV[2]
// its name. read answers {exists, spec, zone, payload, priority, max attempts, missed,
// paused, last fire, next fire or -1}.
const schedPrelude = `
local K_NAMES, K_DUE, K_SCH, NAME = KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[2]
local function read()
  if redis.call('EXISTS', K_SCH) == 0 then return {0} end
  local f = redis.call('HMGET', K_SCH, 's', 'z', 'p', 'pr', 'ma', 'mi', 'pa', 'lf')
  local nf = redis.call('ZSCORE', K_DUE, NAME)
  return {1, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], nf or -1}
end
`

// putSchedScript: ARGV[3..9] spec, zone, payload, priority, max attempts, missed, next fire
// (-1: none), which a running schedule of the same spec and zone does not take: it keeps its
// own. Returns {created, read()}.
var putSchedScript = redis.NewScript(prelude + schedPrelude + `
local created = 1 - redis.call('EXISTS', K_SCH)
local same = created == 0 and redis.call('HGET', K_SCH, 's') == ARGV[3] and redis.call('HGET', K_SCH, 'z') == ARGV[4]
redis.call('HSET', K_SCH, 's', ARGV[3], 'z', ARGV[4], 'p', ARGV[5], 'pr', ARGV[6], 'ma', ARGV[7], 'mi', ARGV[8])
if created == 1 then redis.call('HSET', K_SCH, 'pa', 0, 'lf', 0) end
redis.call('ZADD', K_NAMES, 0, NAME)
local nf = tonumber(ARGV[9])
if redis.call('HGET', K_SCH, 'pa') == '1' or nf < 0 then
  redis.call('ZREM', K_DUE, NAME)
elseif not (same and redis.call('ZSCORE', K_DUE, NAME)) then
  redis.call('ZADD', K_DUE, nf, NAME)
end
return {created, read()}
`)

var getSchedScript = redis.NewScript(prelude + schedPrelude + `return read()`)

var pauseSchedScript = redis.NewScript(prelude + schedPrelude + `
if redis.call('EXISTS', K_SCH) == 1 then
  redis.call('HSET', K_SCH, 'pa', 1)
  redis.call('ZREM', K_DUE, NAME)
end
return read()
`)

// resumeSchedScript: ARGV[3] spec and ARGV[4] zone the next fire ARGV[5] (-1: none) was
// computed from. Returns 1 when it resumed, 0 when the schedule is no longer that paused one.
var resumeSchedScript = redis.NewScript(prelude + schedPrelude + `
local pa, s, z = unpack(redis.call('HMGET', K_SCH, 'pa', 's', 'z'))
if pa ~= '1' or s ~= ARGV[3] or z ~= ARGV[4] then return 0 end
redis.call('HSET', K_SCH, 'pa', 0)
if tonumber(ARGV[5]) >= 0 then redis.call('ZADD', K_DUE, ARGV[5], NAME) end
return 1
`)

// deleteSchedScript returns {deleted, whether the pool has no schedule left}.
var deleteSchedScript = redis.NewScript(prelude + schedPrelude + `
if redis.call('DEL', K_SCH) == 0 then return {0, 0} end
redis.call('ZREM', K_NAMES, NAME)
redis.call('ZREM', K_DUE, NAME)
if redis.call('ZCARD', K_NAMES) == 0 then return {1, 1} end
return {1, 0}
`)

// schedDigestLua defines schedDigest: a digest of everything of a schedule's hash that its
// fire's plan depends on besides the next fire, each field length-prefixed.
const schedDigestLua = `
local function schedDigest(key)
  local f = redis.call('HMGET', key, 's', 'z', 'p', 'pr', 'ma', 'mi')
  local parts = {}
  for i = 1, 6 do
    local v = f[i] or ''
    parts[i] = #v .. ':' .. v
  end
  return redis.sha1hex(table.concat(parts))
end
`

// fireSchedScript applies one Fire: ARGV[3] the next fire it was planned from, ARGV[4] the
// new next fire (-1: none), ARGV[5] the fired tick, then the task (ARGV[6] id, "" for none,
// ARGV[7] payload, ARGV[8] priority, ARGV[9] max attempts), ARGV[10] the schedDigest it was
// planned from. Returns -1 when the schedule's next fire is no longer ARGV[3] (another
// instance fired it, or it was paused or deleted) or it is no longer the schedule planned
// from (put again, or deleted and made anew, with another spec, zone, template or missed
// policy but the same next tick: the old plan must not apply to it), else whether the task
// was added.
var fireSchedScript = redis.NewScript(prelude + schedPrelude + schedDigestLua + `
local nf = redis.call('ZSCORE', K_DUE, NAME)
if not nf or tonumber(nf) ~= tonumber(ARGV[3]) then return -1 end
if schedDigest(K_SCH) ~= ARGV[10] then return -1 end
if tonumber(ARGV[4]) >= 0 then
  redis.call('ZADD', K_DUE, ARGV[4], NAME)
else
  redis.call('ZREM', K_DUE, NAME)
end
redis.call('HSET', K_SCH, 'lf', ARGV[5])
if ARGV[6] == '' then return 0 end
return put(ARGV[6], ARGV[7], tonumber(ARGV[8]), 0, ARGV[9])
`)

// scheduleFrom maps read()'s answer.
func scheduleFrom(pool, name string, v any) (taskpick.Schedule, error) {
	vals, _ := v.([]any)
	if len(vals) < 10 || toInt(vals[0]) != 1 {
		return taskpick.Schedule{}, taskpick.ErrScheduleNotFound
	}
	s := taskpick.Schedule{
		Pool: pool, Name: name, Spec: str(vals[1]), Timezone: str(vals[2]), Payload: []byte(str(vals[3])),
		Priority: int32(toInt(vals[4])), MaxAttempts: uint32(toInt(vals[5])), Missed: taskpick.Missed(toInt(vals[6])),
		Paused: str(vals[7]) == "1",
	}
	if lf := toInt(vals[8]); lf != 0 {
		s.LastFire = time.UnixMilli(lf)
	}
	if nf := toInt(vals[9]); nf >= 0 {
		s.NextFire = time.UnixMilli(nf)
	}
	return s, nil
}

// millisOrNone is a next fire as the scripts take it: -1 for none.
func millisOrNone(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixMilli()
}

// PutSchedule implements taskpick.ScheduleStore.
func (b *Backend) PutSchedule(ctx context.Context, s taskpick.Schedule) (taskpick.Schedule, bool, error) {
	// Registered before the script as well, so a put that dies between its script and the
	// registration after it leaves its schedule in a registered pool (unless a delete of
	// the pool's last schedule raced it in that very gap).
	if err := b.rdb.HIncrBy(ctx, b.schedPoolsKey(), s.Pool, 1).Err(); err != nil {
		return taskpick.Schedule{}, false, b.fail(ctx, err)
	}
	v, err := b.runSched(ctx, b.scripts, putSchedScript, s.Pool, s.Name, s.Spec, s.Timezone, s.Payload, s.Priority,
		s.MaxAttempts, int64(s.Missed), millisOrNone(s.NextFire)).Result()
	if err != nil {
		return taskpick.Schedule{}, false, b.fail(ctx, err)
	}
	// After the script: a DeleteSchedule that emptied the pool meanwhile read an older
	// generation, so it cannot drop the pool this put needs.
	if err := b.rdb.HIncrBy(ctx, b.schedPoolsKey(), s.Pool, 1).Err(); err != nil {
		return taskpick.Schedule{}, false, b.fail(ctx, err)
	}
	vals := v.([]any)
	stored, err := scheduleFrom(s.Pool, s.Name, vals[1])
	return stored, toInt(vals[0]) == 1, err
}

// GetSchedule implements taskpick.ScheduleStore.
func (b *Backend) GetSchedule(ctx context.Context, pool, name string) (taskpick.Schedule, error) {
	v, err := b.runSched(ctx, b.scripts, getSchedScript, pool, name).Result()
	if err != nil {
		return taskpick.Schedule{}, b.fail(ctx, err)
	}
	return scheduleFrom(pool, name, v)
}

// ListSchedules implements taskpick.ScheduleStore: a page of names, then each schedule.
func (b *Backend) ListSchedules(ctx context.Context, pool, after string, limit int) ([]taskpick.Schedule, error) {
	keys, _ := b.schedKeys(pool, "")
	lo := "-"
	if after != "" {
		lo = "(" + after
	}
	names, err := b.rdb.ZRangeByLex(ctx, keys[len(keys)-3], &redis.ZRangeBy{Min: lo, Max: "+", Count: int64(limit)}).Result()
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	out := make([]taskpick.Schedule, 0, len(names))
	for _, name := range names {
		s, err := b.GetSchedule(ctx, pool, name)
		if err == taskpick.ErrScheduleNotFound {
			continue // deleted since the names were read
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// PauseSchedule implements taskpick.ScheduleStore.
func (b *Backend) PauseSchedule(ctx context.Context, pool, name string) (taskpick.Schedule, error) {
	v, err := b.runSched(ctx, b.scripts, pauseSchedScript, pool, name).Result()
	if err != nil {
		return taskpick.Schedule{}, b.fail(ctx, err)
	}
	return scheduleFrom(pool, name, v)
}

// ResumeSchedule implements taskpick.ScheduleStore: next reads the schedule, and the script
// resumes it only while its spec and zone are still the ones next read, else it reads again.
func (b *Backend) ResumeSchedule(ctx context.Context, pool, name string, next func(taskpick.Schedule) time.Time) (taskpick.Schedule, error) {
	for {
		s, err := b.GetSchedule(ctx, pool, name)
		if err != nil || !s.Paused {
			return s, err
		}
		s.Paused, s.NextFire = false, next(s)
		ok, err := b.runSched(ctx, b.scripts, resumeSchedScript, pool, name, s.Spec, s.Timezone, millisOrNone(s.NextFire)).Int64()
		if err != nil {
			return taskpick.Schedule{}, b.fail(ctx, err)
		}
		if ok == 1 {
			return s, nil
		}
		if err := ctx.Err(); err != nil {
			return taskpick.Schedule{}, b.fail(ctx, err)
		}
	}
}

// DeleteSchedule implements taskpick.ScheduleStore.
func (b *Backend) DeleteSchedule(ctx context.Context, pool, name string) error {
	gen, err := b.rdb.HGet(ctx, b.schedPoolsKey(), pool).Result()
	if err != nil && err != redis.Nil {
		return b.fail(ctx, err)
	}
	v, err := b.runSched(ctx, b.scripts, deleteSchedScript, pool, name).Result()
	if err != nil {
		return b.fail(ctx, err)
	}
	vals := v.([]any)
	if toInt(vals[0]) == 0 {
		return taskpick.ErrScheduleNotFound
	}
	if toInt(vals[1]) == 1 && gen != "" {
		if err := unregisterScript.Run(ctx, b.scripts, []string{b.schedPoolsKey()}, pool, gen).Err(); err != nil {
			return b.fail(ctx, err)
		}
	}
	return nil
}

// dueSchedScript reads up to ARGV[3] running schedules due at ARGV[4] (ms): per schedule its
// name, then read()'s fields, then its schedDigest. The last key, the hash of the schedule named "", is every
// schedule hash's prefix.
var dueSchedScript = redis.NewScript(prelude + schedDigestLua + `
local K_DUE, prefix = KEYS[#KEYS - 1], KEYS[#KEYS]
local names = redis.call('ZRANGEBYSCORE', K_DUE, '-inf', ARGV[4], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for i = 1, #names, 2 do
  local f = redis.call('HMGET', prefix .. names[i], 's', 'z', 'p', 'pr', 'ma', 'mi', 'pa', 'lf')
  if f[1] then
    out[#out + 1] = {names[i], 1, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], names[i + 1], schedDigest(prefix .. names[i])}
  end
end
return out
`)

// fireConcurrency bounds the fire scripts one FireDue has in flight; the pipelined scripter
// sends concurrent ones together.
const fireConcurrency = 32

// FireDue implements taskpick.ScheduleStore: per pool with schedules, one script reads its
// due schedules (up to what is left of limit), then one script per schedule fires it,
// checking the next fire it was planned from; the fires run concurrently.
func (b *Backend) FireDue(ctx context.Context, now time.Time, limit int, plan func(taskpick.Schedule) taskpick.Fire) ([]taskpick.Fired, error) {
	pools, err := b.rdb.HKeys(ctx, b.schedPoolsKey()).Result()
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	type dueSchedule struct {
		taskpick.Schedule
		digest string // of what the plan reads (schedDigestLua)
	}
	var due []dueSchedule
	for _, pool := range pools {
		if len(due) >= limit {
			break
		}
		v, err := b.runSched(ctx, b.scripts, dueSchedScript, pool, "", limit-len(due), now.UnixMilli()).Result()
		if err != nil {
			return nil, b.fail(ctx, err)
		}
		for _, x := range v.([]any) {
			row := x.([]any)
			s, err := scheduleFrom(pool, str(row[0]), row[1:])
			if err != nil || s.Paused || s.NextFire.IsZero() || s.NextFire.After(now) {
				continue
			}
			due = append(due, dueSchedule{s, str(row[11])})
		}
	}
	var (
		mu    sync.Mutex
		out   []taskpick.Fired
		first error
		wg    sync.WaitGroup
		slots = make(chan struct{}, fireConcurrency)
	)
	for _, s := range due {
		f := plan(s.Schedule)
		args := []any{s.NextFire.UnixMilli(), millisOrNone(f.Next), f.Fired.UnixMilli(), "", "", 0, 0, s.digest}
		if f.Task != nil {
			args[3], args[4], args[5], args[6] = f.Task.ID, f.Task.Payload, f.Task.Priority, f.Task.MaxAttempts
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			r, err := b.runSched(ctx, b.scripts, fireSchedScript, s.Pool, s.Name, args...).Int64()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if first == nil {
					first = b.fail(ctx, err)
				}
			case r >= 0:
				out = append(out, taskpick.Fired{Pool: s.Pool, Name: s.Name, Created: r == 1})
			}
		})
	}
	wg.Wait()
	return out, first
}
