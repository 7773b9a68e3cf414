package redistask

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/taskpick"
)

// Every script takes the pool's keys (see Layout.Keys) as KEYS and the task-key prefix as
// ARGV[1]; task hashes are ARGV[1] .. id. All of a pool's keys share one hash slot.
//
// The settings hash (K_SET) holds: paused (1 while paused), ma the default max attempts, and
// the retry policy: ri initial ms, rc cap ms, rm multiplier, rj jitter (no ri: no policy), and
// ml the most tasks leased at once (0 or none: no limit), and the rate limit: rt tasks a
// second (0 or none: none), rb the bucket's size, bt its tokens at bm, ms (taskpick.Refill).
//
// A task hash holds: p payload, pr priority, st state (1 available, 2 leased, 3 dead, 4 done,
// 5 cancelled),
// m its member in the ready sets while it is ready, ra (ready: when it became available;
// delayed: when it is due; leased: the lease's end; dead: when it died; done: purge time),
// tk the last lease token, lh the digest of the lease's secret, at attempts, ma max attempts, f failures, r recoveries, e last error.
var prelude = `
local K_READY, K_FIFO, K_DELAYED, K_LEASED, K_DEAD, K_DONE, K_SEQ, K_REG, K_SET, K_CANC =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local P = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function ready(id, key, prio, at)
  local seq = redis.call('INCR', K_SEQ)
  local m = string.format('%012x%016x', at, seq) .. id
  redis.call('HSET', key, 'st', 1, 'm', m, 'ra', string.format('%.0f', at))
  redis.call('ZADD', K_FIFO, at, m)
  redis.call('ZADD', K_READY, -prio, m)
end
local function promote(limit)
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #due, 2 do
    local key = P .. due[i]
    redis.call('ZREM', K_DELAYED, due[i])
    ready(due[i], key, tonumber(redis.call('HGET', key, 'pr')), tonumber(due[i + 1]))
  end
  return #due / 2
end
-- unclaim deletes the queued or active unique key of the task at key, about to be deleted,
-- if the key still names it: storage stays bounded by the tasks.
local function unclaim(key, id)
  local uk, us = unpack(redis.call('HMGET', key, 'uk', 'us'))
  if uk and us ~= '3' and redis.call('GET', P .. '\0' .. uk) == us .. id then redis.call('DEL', P .. '\0' .. uk) end
end
local function register()
  if redis.call('EXISTS', K_REG) == 1 then return 0 end
  redis.call('SET', K_REG, 1)
  return 1
end
-- put adds the task id unless it exists: 1 when it added it, 0 when it existed.
local function put(id, payload, prio, delay, maxa)
  local key = P .. id
  if redis.call('EXISTS', key) == 1 then return 0 end
  if maxa == '0' then
    maxa = redis.call('HGET', K_SET, 'ma')
    if not maxa or maxa == '0' then maxa = '` + strconv.Itoa(taskpick.DefaultMaxAttempts) + `' end
  end
  local tok = string.format('%.0f', (now + 2) * 1024)
  redis.call('HSET', key, 'p', payload, 'pr', prio, 'tk', tok, 'at', 0, 'ma', maxa, 'f', 0, 'r', 0, 'e', '')
  if delay > 0 then
    redis.call('HSET', key, 'st', 1, 'm', '', 'ra', string.format('%.0f', now + 1 + delay))
    redis.call('ZADD', K_DELAYED, now + 1 + delay, id)
  else
    ready(id, key, prio, now)
  end
  return 1
end
-- held: 1 when token and digest hold an unexpired lease on key, 0 when the task is missing,
-- -1 stale. A lease taken before leases had secrets has no digest: nothing finishes it.
local function held(key, token, digest)
  local st, tk, lh, ra = unpack(redis.call('HMGET', key, 'st', 'tk', 'lh', 'ra'))
  if not st then return 0 end
  if st ~= '2' or tk ~= token or not lh or lh == '' or lh ~= digest or tonumber(ra) <= now then return -1 end
  return 1
end
-- policyDelay is the pool's retry delay in ms after the failure of attempt at, as
-- taskpick.DelayMillis computes it, with draw in [0, 1).
local function policyDelay(at, draw)
  local ri, rc, rm, rj = unpack(redis.call('HMGET', K_SET, 'ri', 'rc', 'rm', 'rj'))
  ri = tonumber(ri or '0') or 0
  if ri <= 0 then return 0 end
  rc, rm, rj = tonumber(rc), tonumber(rm), tonumber(rj)
  local d, i = ri, 1
  while i < at and i < 1000 and d < rc do -- 1000: taskpick.MaxAttempts
    d = d * rm
    i = i + 1
  end
  if d > rc then d = rc end
  d = d * (1 - rj * draw)
  return math.ceil(d)
end
-- cost bounds a task's bytes in an answer, as taskpick.AnswerBytes.
local function cost(plen, slen)
  return 4 * math.floor((plen + 2) / 3) + 6 * slen + 256
end
`

// putScript: ARGV[2..] per task: id, payload, priority, delay ms, max attempts, unique key
// (empty for none), unique scope (1 queued, 2 active, 3 period), unique period ms. Returns per
// task: result (1 created, 0 id exists, 2 duplicate), holder id, holder state (0 gone, then
// as taskpick.State).
//
// A unique key lives at P .. '\0' .. key (no task id holds NUL, so it never names a task
// hash) and holds the id of the task that claimed it; that task's hash keeps the key (uk)
// and scope (us). A queued or active key is held while its task still has that key and is
// in scope (taskpick.UniqueScope.Holds); it is deleted with its task's hash. A period key
// expires by itself (PX).
var putScript = redis.NewScript(prelude + `
local out = {}
local function state(key)
  local st, ra, at = unpack(redis.call('HMGET', key, 'st', 'ra', 'at'))
  if not st then return 0, 0 end
  if st == '1' then
    if tonumber(ra) > now then return 2, tonumber(at) end
    return 1, tonumber(at)
  end
  return tonumber(st) + 1, tonumber(at)
end
local function holder(ukey)
  local v = redis.call('GET', P .. '\0' .. ukey)
  if not v then return nil end
  local hid = string.sub(v, 2)
  local s, at = state(P .. hid)
  if string.sub(v, 1, 1) == '3' then return hid, s end
  local uk, us = unpack(redis.call('HMGET', P .. hid, 'uk', 'us'))
  if uk ~= ukey then return nil end
  if us == '1' and (s == 1 or s == 2) and at == 0 then return hid, s end
  if us == '2' and s >= 1 and s <= 3 then return hid, s end
  return nil
end
local i = 2
while i <= #ARGV do
  local id = ARGV[i]
  local ukey, uscope, uperiod = ARGV[i + 5], ARGV[i + 6], tonumber(ARGV[i + 7])
  local hid, hst
  if ukey ~= '' then hid, hst = holder(ukey) end
  if hid and (hid ~= id or hst == 0) then -- the holder's own id, gone, is a new task
    out[#out + 1] = 2
    out[#out + 1] = hid
    out[#out + 1] = hst
  else
    local added = put(id, ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), ARGV[i + 4])
    if added == 1 and ukey ~= '' then
      redis.call('HSET', P .. id, 'uk', ukey, 'us', uscope)
      if uscope == '3' then
        redis.call('SET', P .. '\0' .. ukey, uscope .. id, 'PX', uperiod)
      else
        redis.call('SET', P .. '\0' .. ukey, uscope .. id)
      end
    end
    out[#out + 1] = added
    out[#out + 1] = ''
    out[#out + 1] = 0
  end
  i = i + 8
end
return out
`)

// pickScript: ARGV[2] count, ARGV[3] ttl ms, ARGV[4] order (fifo, priority, random), ARGV[5]
// the answer's byte budget, ARGV[6..] the new leases' digests, one per task in pick order.
// Returns {registered, next due or -1, full, paused, limited, then per task in pick order:
// id, payload, priority, token, attempt, max}; full is 1 when the budget stopped the pick,
// paused 1 when the pool is paused (and nothing was picked), limited 1 when the pool's ml
// live leases (those in K_LEASED that end after now) left no place (nothing was picked; next
// due is then the earliest end of one of them, or a delayed task's due time if earlier), or
// when the rate limit's bucket had no token (next due is then when the next comes).
var pickScript = redis.NewScript(prelude + `
local n, ttl, order, budget = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local paused, ml, rt, rb, bt, bm = unpack(redis.call('HMGET', K_SET, 'paused', 'ml', 'rt', 'rb', 'bt', 'bm'))
if paused == '1' then return {0, -1, 0, 1, 0} end
rt = tonumber(rt or '0') or 0
local tokens = 0
if rt > 0 then
  rb = tonumber(rb or '0') or 0
  if rb < 1 then rb = 1 end
  bm = tonumber(bm or '0') or 0
  tokens = rb
  if bm > 0 then tokens = math.min(rb, tonumber(bt) + math.max(now - bm, 0) * rt / 1000) end
  if tokens < 1 then return {0, now + math.max(math.ceil((1 - tokens) * 1000 / rt), 1), 0, 0, 1} end
  if math.floor(tokens) < n then n = math.floor(tokens) end
end
ml = tonumber(ml or '0') or 0
if ml > 0 then
  local free = ml - redis.call('ZCOUNT', K_LEASED, '(' .. now, '+inf')
  if free <= 0 then
    local due = -1
    local first = redis.call('ZRANGEBYSCORE', K_LEASED, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #first > 0 then due = tonumber(first[2]) end
    local d = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
    if #d > 0 and (due < 0 or tonumber(d[2]) < due) then due = tonumber(d[2]) end
    return {0, due, 0, 0, 1}
  end
  if free < n then n = free end
end
promote(1000)
local members
if order == 'random' then
  members = redis.call('ZRANDMEMBER', K_FIFO, n)
elseif order == 'priority' then
  members = redis.call('ZRANGE', K_READY, 0, n - 1)
else
  members = redis.call('ZRANGE', K_FIFO, 0, n - 1)
end
local out = {0, -1, 0, 0, 0}
if #members > 0 then out[1] = register() end
local exp = now + 1 + ttl
local used, taken = 0, 0
for _, m in ipairs(members) do
  local id = string.sub(m, 29)
  local key = P .. id
  used = used + cost(redis.call('HSTRLEN', key, 'p'), #id)
  if used > budget and taken > 0 then
    out[3] = 1
    break
  end
  taken = taken + 1
  redis.call('ZREM', K_FIFO, m)
  redis.call('ZREM', K_READY, m)
  local tok = math.max(tonumber(redis.call('HGET', key, 'tk')) + 1, now * 1024)
  local at = redis.call('HINCRBY', key, 'at', 1)
  local stok = string.format('%.0f', tok)
  redis.call('HSET', key, 'st', 2, 'm', '', 'tk', stok, 'lh', ARGV[5 + taken], 'ra', string.format('%.0f', exp))
  redis.call('ZADD', K_LEASED, exp, id)
  local payload, prio, maxa = unpack(redis.call('HMGET', key, 'p', 'pr', 'ma'))
  for _, v in ipairs({id, payload, prio, stok, at, maxa}) do out[#out + 1] = v end
end
if rt > 0 then redis.call('HSET', K_SET, 'bt', tostring(tokens - taken), 'bm', now) end
if taken < n and out[3] == 0 then
  local first = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
  if #first > 0 then out[2] = first[2] end
end
return out
`)

// ackScript: ARGV[2] id, ARGV[3] token, ARGV[4] digest, ARGV[5] retention ms. Returns
// {held, registered}.
var ackScript = redis.NewScript(prelude + `
local id, keep = ARGV[2], tonumber(ARGV[5])
local key = P .. id
local h = held(key, ARGV[3], ARGV[4])
if h ~= 1 then return {h, 0} end
redis.call('ZREM', K_LEASED, id)
if keep > 0 then
  redis.call('HSET', key, 'st', 4, 'ra', string.format('%.0f', now + keep))
  redis.call('ZADD', K_DONE, now + keep, id)
  return {1, register()}
end
unclaim(key, id)
redis.call('DEL', key)
return {1, 0}
`)

// extendScript: ARGV[2] id, ARGV[3] token, ARGV[4] digest, ARGV[5] ttl ms. Returns held.
var extendScript = redis.NewScript(prelude + `
local id = ARGV[2]
local key = P .. id
local h = held(key, ARGV[3], ARGV[4])
if h ~= 1 then return h end
local exp = now + 1 + tonumber(ARGV[5])
redis.call('HSET', key, 'ra', string.format('%.0f', exp))
redis.call('ZADD', K_LEASED, exp, id)
return 1
`)

// nackScript: ARGV[2] id, ARGV[3] token, ARGV[4] digest, ARGV[5] retry-after ms (-1: the
// pool's policy), ARGV[6] reason, ARGV[7] the policy's jitter draw. Returns held, or 2 when
// the task died.
var nackScript = redis.NewScript(prelude + `
local id, delay = ARGV[2], tonumber(ARGV[5])
local key = P .. id
local h = held(key, ARGV[3], ARGV[4])
if h ~= 1 then return h end
redis.call('ZREM', K_LEASED, id)
redis.call('HINCRBY', key, 'f', 1)
redis.call('HSET', key, 'e', ARGV[6])
local at, maxa, prio = unpack(redis.call('HMGET', key, 'at', 'ma', 'pr'))
if tonumber(at) >= tonumber(maxa) then
  redis.call('HSET', key, 'st', 3, 'ra', now)
  redis.call('ZADD', K_DEAD, now, id)
  return 2
end
if delay < 0 then delay = policyDelay(tonumber(at), tonumber(ARGV[7])) end
if delay > 0 then
  redis.call('HSET', key, 'st', 1, 'm', '', 'ra', string.format('%.0f', now + delay))
  redis.call('ZADD', K_DELAYED, now + delay, id)
else
  ready(id, key, tonumber(prio), now)
end
return 1
`)

// getScript: ARGV[2] id. Returns {now, p, pr, st, at, ma, f, r, ra, e} or {} when missing.
var getScript = redis.NewScript(prelude + `
local key = P .. ARGV[2]
local v = redis.call('HMGET', key, 'p', 'pr', 'st', 'at', 'ma', 'f', 'r', 'ra', 'e')
if not v[3] then return {} end
table.insert(v, 1, now)
return v
`)

// statsScript returns {now, available, delayed, leased, dead, done, oldest ready-at or -1,
// cancelled}.
var statsScript = redis.NewScript(prelude + `
local due = redis.call('ZCOUNT', K_DELAYED, '-inf', now)
local oldest = -1
local f = redis.call('ZRANGE', K_FIFO, 0, 0, 'WITHSCORES')
if #f > 0 then oldest = tonumber(f[2]) end
if due > 0 then
  local d = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
  if oldest < 0 or tonumber(d[2]) < oldest then oldest = tonumber(d[2]) end
end
return {now, redis.call('ZCARD', K_FIFO) + due, redis.call('ZCARD', K_DELAYED) - due,
  redis.call('ZCARD', K_LEASED), redis.call('ZCARD', K_DEAD), redis.call('ZCARD', K_DONE), oldest,
  redis.call('ZCARD', K_CANC)}
`)

// listDeadScript: ARGV[2] limit, ARGV[3] the answer's byte budget. Returns {total, truncated,
// then per task: id, p, pr, at, ma, f, r, ra, e}; it reads no payload that does not fit.
var listDeadScript = redis.NewScript(prelude + `
local ids = redis.call('ZRANGE', K_DEAD, 0, tonumber(ARGV[2]) - 1)
local budget = tonumber(ARGV[3])
local out = {redis.call('ZCARD', K_DEAD), 0}
local used = 0
for i, id in ipairs(ids) do
  local key = P .. id
  used = used + cost(redis.call('HSTRLEN', key, 'p'), #id + redis.call('HSTRLEN', key, 'e'))
  if used > budget and i > 1 then
    out[2] = 1
    break
  end
  out[#out + 1] = id
  for _, v in ipairs(redis.call('HMGET', P .. id, 'p', 'pr', 'at', 'ma', 'f', 'r', 'ra', 'e')) do
    out[#out + 1] = v or ''
  end
end
return out
`)

// requeueScript: ARGV[2..] ids. Returns 1/0 per id.
var requeueScript = redis.NewScript(prelude + `
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local key = P .. id
  if redis.call('HGET', key, 'st') == '3' then
    redis.call('ZREM', K_DEAD, id)
    redis.call('HSET', key, 'at', 0, 'f', 0, 'r', 0, 'e', '')
    ready(id, key, tonumber(redis.call('HGET', key, 'pr')), now)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
`)

// sweepScript: ARGV[2] limit, ARGV[3] last-attempt message. Recovers expired leases, makes
// due delayed tasks ready, purges done tasks past retention. Returns {recovered, died,
// promoted, idle} where idle is 1 when the pool has nothing left to sweep (its registration is
// then dropped).
var sweepScript = redis.NewScript(prelude + `
local limit = tonumber(ARGV[2])
local back, died = 0, 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_LEASED, '-inf', now, 'LIMIT', 0, limit)) do
  local key = P .. id
  redis.call('ZREM', K_LEASED, id)
  redis.call('HINCRBY', key, 'r', 1)
  local at, maxa, prio = unpack(redis.call('HMGET', key, 'at', 'ma', 'pr'))
  if tonumber(at) >= tonumber(maxa) then
    redis.call('HSET', key, 'st', 3, 'ra', now, 'e', ARGV[3])
    redis.call('ZADD', K_DEAD, now, id)
    died = died + 1
  else
    ready(id, key, tonumber(prio), now)
    back = back + 1
  end
end
local promoted = promote(limit)
for _, kept in ipairs({K_DONE, K_CANC}) do
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', kept, '-inf', now, 'LIMIT', 0, limit)) do
    redis.call('ZREM', kept, id)
    unclaim(P .. id, id)
    redis.call('DEL', P .. id)
  end
end
local idle = 0
if redis.call('ZCARD', K_LEASED) == 0 and redis.call('ZCARD', K_DONE) == 0 and redis.call('ZCARD', K_DELAYED) == 0 and
    redis.call('ZCARD', K_CANC) == 0 then
  redis.call('DEL', K_REG)
  idle = 1
end
return {back, died, promoted, idle}
`)

// cancelScript: ARGV[2] id, ARGV[3] retention ms. Returns {result, registered}: result 1
// cancelled (or already cancelled), 0 missing, else the task's state (2 leased, 3 dead, 4
// done).
var cancelScript = redis.NewScript(prelude + `
local id, keep = ARGV[2], tonumber(ARGV[3])
local key = P .. id
local st, m = unpack(redis.call('HMGET', key, 'st', 'm'))
if not st then return {0, 0} end
if st == '5' then return {1, 0} end
if st ~= '1' then return {tonumber(st), 0} end
if m and m ~= '' then
  redis.call('ZREM', K_FIFO, m)
  redis.call('ZREM', K_READY, m)
else
  redis.call('ZREM', K_DELAYED, id)
end
if keep > 0 then
  redis.call('HSET', key, 'st', 5, 'm', '', 'ra', string.format('%.0f', now + keep))
  redis.call('ZADD', K_CANC, now + keep, id)
  return {1, register()}
end
unclaim(key, id)
redis.call('DEL', key)
return {1, 0}
`)

// settingsScript returns the settings hash as {paused, ma, ri, rc, rm, rj, exists, ml, rt,
// rb}.
var settingsScript = redis.NewScript(prelude + `
local v = redis.call('HMGET', K_SET, 'paused', 'ma', 'ri', 'rc', 'rm', 'rj')
v[7] = redis.call('EXISTS', K_SET)
v[8] = redis.call('HGET', K_SET, 'ml') or '0'
v[9] = redis.call('HGET', K_SET, 'rt') or '0'
v[10] = redis.call('HGET', K_SET, 'rb') or '0'
return v
`)

// setSettingsScript: ARGV[2] ma, ARGV[3..6] ri, rc, rm, rj (an empty ri for no policy), ARGV[7]
// ml, ARGV[8] rt, ARGV[9] rb. It replaces them in one step, keeping paused and the bucket's
// tokens (a smaller burst caps them at the next pick), and returns as settingsScript.
var setSettingsScript = redis.NewScript(prelude + `
redis.call('HDEL', K_SET, 'ri', 'rc', 'rm', 'rj')
redis.call('HSET', K_SET, 'ma', ARGV[2], 'ml', ARGV[7], 'rt', ARGV[8], 'rb', ARGV[9])
if ARGV[3] ~= '' then
  redis.call('HSET', K_SET, 'ri', ARGV[3], 'rc', ARGV[4], 'rm', ARGV[5], 'rj', ARGV[6])
end
if not redis.call('HGET', K_SET, 'paused') then redis.call('HSET', K_SET, 'paused', 0) end
local v = redis.call('HMGET', K_SET, 'paused', 'ma', 'ri', 'rc', 'rm', 'rj')
v[7] = 1
v[8], v[9], v[10] = ARGV[7], ARGV[8], ARGV[9]
return v
`)

// pauseScript: ARGV[2] 1 to pause, 0 to resume.
var pauseScript = redis.NewScript(prelude + `
redis.call('HSET', K_SET, 'paused', ARGV[2])
return 1
`)
