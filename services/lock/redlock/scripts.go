package redlock

import "github.com/redis/go-redis/v9"

// Every call to a node is one Lua script, so each is atomic on that node. The per-node layout
// is the single-Redis backend's (redislock.Layout): KEYS[1] is the lock hash with the lease as
// its PEXPIRE, KEYS[2] the fencing counter of its slot. The hash holds {owner, count, fence,
// ttl} and, in Redlock only:
//
//   - fence 0 and att: taken by the first round of the acquire whose random attempt id is att,
//     not confirmed yet ("pending"). Only that attempt stamps or drops it; a same-owner call
//     meeting it neither re-enters nor releases it, so the counts of a lease start exact.
//   - loose 1: the node joined the lease late (it had lost it, or kept an older one) and its
//     count was copied from the majority at that moment, while other calls may have been in
//     flight: it is not exact. A loose node never frees the lock by counting down to 0; it
//     goes with the lease's purge or its ttl.

// acquireScript is an acquire's first round: ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3]
// attempt id, ARGV[4] the highest hold count allowed. It takes a free key (pending),
// re-enters a confirmed lease of the owner, or changes nothing, and always reports the
// node's fencing counter, read in the same step as the take.
// Returns {status, counter, count, fence, pttl, holder}; status 1 taken, 2 re-entered, 3 the
// owner's own pending take, 4 the owner's count is at the limit, 0 held by holder.
var acquireScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence')
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if v[1] == false then
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', 0, 'ttl', ARGV[2], 'att', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, counter, 1, 0, tonumber(ARGV[2]), ''}
end
if v[1] == ARGV[1] then
  if v[3] == '0' then
    return {3, counter, tonumber(v[2]), 0, redis.call('PTTL', KEYS[1]), v[1]}
  end
  if tonumber(v[2]) >= tonumber(ARGV[4]) then
    return {4, counter, tonumber(v[2]), tonumber(v[3]), redis.call('PTTL', KEYS[1]), v[1]}
  end
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('HSET', KEYS[1], 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, counter, count, tonumber(v[3]), tonumber(ARGV[2]), ''}
end
return {0, counter, tonumber(v[2]), tonumber(v[3]), redis.call('PTTL', KEYS[1]), v[1]}
`)

// stampScript confirms a take in an acquire's second round: ARGV[1] owner, ARGV[2] token,
// ARGV[3] attempt id. Only while the node still holds this attempt's pending take (or has
// already been given the token) does it write the token into the lock and raise the counter
// to at least the token; the count and lease stay as the first round set them. Returns 1 when
// the node holds the lease with the token, 0 when it does not.
var stampScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'att')
if v[1] ~= ARGV[1] then return 0 end
if v[2] == ARGV[2] then return 1 end
if v[2] ~= '0' or v[3] ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[2])
redis.call('HDEL', KEYS[1], 'att')
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
`)

// joinScript makes a node of the owner's a loose member of the lease with token ARGV[2]:
// ARGV[1] owner, ARGV[3] the count to start from. It rewrites the node while the owner holds
// it there, whatever it held (an own take, a pending one, an older lease), and raises the
// counter to at least the token. Returns 1 when joined, 0 when the owner does not hold it.
var joinScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[2], 'count', ARGV[3], 'loose', 1)
redis.call('HDEL', KEYS[1], 'att')
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
`)

// dropScript deletes what an attempt or a lease left on a node: ARGV[1] owner, ARGV[2] an
// attempt id (empty for none), ARGV[3] a token ('0' for none). It deletes the hash only while
// owner holds it pending for that attempt, or with that token, so it never removes a
// concurrent attempt's take or another lease. Returns 1 when deleted.
var dropScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'att')
if v[1] ~= ARGV[1] then return 0 end
local mine = (v[2] == '0' and ARGV[2] ~= '' and v[3] == ARGV[2]) or (ARGV[3] ~= '0' and v[2] == ARGV[3])
if not mine then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// releaseScript drops one hold on one node: ARGV[1] owner. Returns {holds left, fence}; {-1}
// when the node does not hold a confirmed lease, {-2} for another owner. An exact node frees
// the key at 0; a loose one stays, at no less than 0, until the purge or its ttl.
var releaseScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'loose')
if v[1] == false then return {-1} end
if v[1] ~= ARGV[1] then return {-2} end
if v[2] == '0' then return {-1} end
local count = redis.call('HINCRBY', KEYS[1], 'count', -1)
if count <= 0 then
  if v[3] then
    redis.call('HSET', KEYS[1], 'count', 0)
    return {0, tonumber(v[2])}
  end
  redis.call('DEL', KEYS[1])
  return {0, tonumber(v[2])}
end
return {count, tonumber(v[2])}
`)

// renewScript extends the owner's confirmed lease on one node: ARGV[1] owner, ARGV[2] ttl in
// ms, or 0 for the lease's own ttl (which a non-zero ARGV[2] replaces). Returns {1, fence,
// count, ttl used}, {-1} when not held, {-2} for another owner.
var renewScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'ttl')
if v[1] == false then return {-1} end
if v[1] ~= ARGV[1] then return {-2} end
if v[3] == '0' then return {-1} end
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  ttl = tonumber(v[4]) or 30000
else
  redis.call('HSET', KEYS[1], 'ttl', ttl)
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, tonumber(v[3]), tonumber(v[2]), ttl}
`)
