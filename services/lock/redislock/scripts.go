package redislock

import "github.com/redis/go-redis/v9"

// Every operation is one Lua script, so each is atomic on the Redis server: no SETNX then
// EXPIRE, no GET then DEL. KEYS[1] is the lock hash {owner, count, fence, ttl, holder} with the
// lease as its PEXPIRE (owner is the digest the service passes, never a secret; holder the
// lease's random public id, absent from hashes older versions wrote); KEYS[2] is the fencing counter of the hash's slot (see Layout), which has no
// expiry so that tokens keep increasing across holders after the hash expired or was deleted.
// Redis expires a key only once its clock is strictly past the deadline it computed from the
// whole milliseconds of the instant PEXPIRE ran, so a lease never ends before start + ttl.

// acquireScript: KEYS[3] the lease key (Layout.LeaseKey); ARGV[1] owner, ARGV[2] ttl in ms,
// ARGV[3] the highest hold count allowed, ARGV[4] the lease key's grace in ms, ARGV[5] the
// holder id a new lease gets. Returns {status, fence, count, ttl or holder's pttl in ms,
// holder id, ended}: status 1 acquired (holder id: the lease's), 0 held by another owner
// (holder id: theirs, "" when an older version wrote the lease), -3 the owner's hold count is
// at ARGV[3] (nothing changed); ended is the lease key's "<fence>/<holder id>" when a new
// holder found a lease that ran out unreleased and unreported (the caller reports it), else "".
var acquireScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'holder')
if v[1] == false then
  local ended = redis.call('GET', KEYS[3]) or ''
  local fence = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', fence, 'ttl', ARGV[2], 'holder', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], fence .. '/' .. ARGV[5], 'PX', tonumber(ARGV[2]) + tonumber(ARGV[4]))
  return {1, fence, 1, tonumber(ARGV[2]), ARGV[5], ended}
end
local holder = v[4] or ''
if v[1] == ARGV[1] then
  if tonumber(v[2]) >= tonumber(ARGV[3]) then
    return {-3, tonumber(v[3]), tonumber(v[2]), redis.call('PTTL', KEYS[1]), '', ''}
  end
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('HSET', KEYS[1], 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], v[3] .. '/' .. holder, 'PX', tonumber(ARGV[2]) + tonumber(ARGV[4]))
  return {1, tonumber(v[3]), count, tonumber(ARGV[2]), holder, ''}
end
return {0, tonumber(v[3]), tonumber(v[2]), redis.call('PTTL', KEYS[1]), holder, ''}
`)

// releaseScript drops one hold: KEYS[1] the hash, KEYS[2] the lease key; ARGV[1] owner,
// ARGV[2] the lease's fencing token or 0 for any. Returns {holds left, the lease's fence, its
// holder id}; {-1} when not held (or held with another token), {-2} for another owner. The
// last hold deletes the hash and the lease key: a released lease has no expiry to report.
var releaseScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'holder')
if v[1] == false then return {-1} end
if v[1] ~= ARGV[1] then return {-2} end
if ARGV[2] ~= '0' and v[2] ~= ARGV[2] then return {-1} end
local count = redis.call('HINCRBY', KEYS[1], 'count', -1)
if count <= 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
  count = 0
end
return {count, tonumber(v[2]), v[3] or ''}
`)

// renewScript extends the owner's lease: KEYS[1] the hash, KEYS[2] the lease key; ARGV[1]
// owner, ARGV[2] ttl in ms, or 0 for the lease's own ttl (which a non-zero ARGV[2] replaces),
// ARGV[3] the lease key's grace in ms. Returns {1, fence, count, ttl used, holder id}, {-1}
// when not held, {-2} for another owner.
var renewScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'ttl', 'holder')
if v[1] == false then return {-1} end
if v[1] ~= ARGV[1] then return {-2} end
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  ttl = tonumber(v[4]) or 30000
else
  redis.call('HSET', KEYS[1], 'ttl', ttl)
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], v[3] .. '/' .. (v[5] or ''), 'PX', ttl + tonumber(ARGV[3]))
return {1, tonumber(v[3]), tonumber(v[2]), ttl, v[5] or ''}
`)

// endExpiredScript: KEYS[1] the hash, KEYS[2] the lease key. While the lock is held it
// returns {"", 1, fence, count, pttl, holder id}. Otherwise it takes the lease key, which is
// there only while a lease that ran out unreleased is unreported, and returns {its value or
// "", 0}: exactly one caller gets each value, and reports it.
var endExpiredScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'holder')
if v[1] ~= false then
  return {'', 1, tonumber(v[3]), tonumber(v[2]), redis.call('PTTL', KEYS[1]), v[4] or ''}
end
local ended = redis.call('GET', KEYS[2])
if ended == false then return {'', 0} end
redis.call('DEL', KEYS[2])
return {ended, 0}
`)

// InspectScript reads one node's lock: {0} when free, else {1, fence, count, pttl, holder
// id, owner, att} (holder id and att "" when the hash has none). Shared with redlock, whose
// per-node hash has the same fields plus att, the lease's random identity there.
var InspectScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'holder', 'att')
if v[1] == false then return {0} end
return {1, tonumber(v[3]), tonumber(v[2]), redis.call('PTTL', KEYS[1]), v[4] or '', v[1], v[5] or ''}
`)

// fairAcquireScript is acquireScript for a waiter in key's fair line. KEYS[1..3] as
// acquireScript, KEYS[4] the line (owner -> arrival), KEYS[5] entry deadlines ('o:'..owner ->
// ms; the prefix keeps owners, which callers choose, apart from '#seq', the arrival
// counter). ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] the highest hold count, ARGV[4] the
// entry's lease in ms, ARGV[5] the lease key's grace in ms, ARGV[6] the holder id a new
// lease gets. Entries whose deadline passed (their waiter's
// instance died, or the waiter left without saying so) are dropped from the front first. The
// lock is taken only when it is free and owner is first among the live entries (or the line
// is empty); a re-entry by the holder never queues. Otherwise owner keeps its place, or
// takes the last one, with its deadline moved to now + ARGV[4]. Returns acquireScript's
// six values (status 2: free, but a waiter ahead has the turn), plus the owner's place in
// line (1 = next) and its arrival number when not acquired.
var fairAcquireScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'holder')
local holder = v[4] or ''
if v[1] == ARGV[1] then
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[5], 'o:' .. ARGV[1])
  if tonumber(v[2]) >= tonumber(ARGV[3]) then
    return {-3, tonumber(v[3]), tonumber(v[2]), redis.call('PTTL', KEYS[1]), '', '', 0, 0}
  end
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('HSET', KEYS[1], 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], v[3] .. '/' .. holder, 'PX', tonumber(ARGV[2]) + tonumber(ARGV[5]))
  return {1, tonumber(v[3]), count, tonumber(ARGV[2]), holder, '', 0, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while true do
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)
  if #head == 0 then break end
  local dl = tonumber(redis.call('HGET', KEYS[5], 'o:' .. head[1]))
  if dl and dl >= now then break end
  redis.call('ZREM', KEYS[4], head[1])
  redis.call('HDEL', KEYS[5], 'o:' .. head[1])
end
local head = redis.call('ZRANGE', KEYS[4], 0, 0)
if v[1] == false and (#head == 0 or head[1] == ARGV[1]) then
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[5], 'o:' .. ARGV[1])
  if redis.call('ZCARD', KEYS[4]) == 0 then redis.call('DEL', KEYS[4], KEYS[5]) end
  local ended = redis.call('GET', KEYS[3]) or ''
  local fence = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', fence, 'ttl', ARGV[2], 'holder', ARGV[6])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], fence .. '/' .. ARGV[6], 'PX', tonumber(ARGV[2]) + tonumber(ARGV[5]))
  return {1, fence, 1, tonumber(ARGV[2]), ARGV[6], ended, 0, 0}
end
if redis.call('ZSCORE', KEYS[4], ARGV[1]) == false then
  redis.call('ZADD', KEYS[4], redis.call('HINCRBY', KEYS[5], '#seq', 1), ARGV[1])
end
redis.call('HSET', KEYS[5], 'o:' .. ARGV[1], now + tonumber(ARGV[4]))
redis.call('PEXPIRE', KEYS[4], ARGV[4])
redis.call('PEXPIRE', KEYS[5], ARGV[4])
local place = redis.call('ZRANK', KEYS[4], ARGV[1]) + 1
local seq = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]))
if v[1] == false then
  return {2, 0, 0, 0, '', '', place, seq}
end
return {0, tonumber(v[3]), tonumber(v[2]), redis.call('PTTL', KEYS[1]), holder, '', place, seq}
`)

// leaveQueueScript takes ARGV[1] out of the fair line KEYS[1] (deadlines KEYS[2]); the keys
// go when the line is empty.
var leaveQueueScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], 'o:' .. ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[1], KEYS[2]) end
return 1
`)
