package redlock

import "github.com/redis/go-redis/v9"

// Every call to a node is one Lua script, so each is atomic on that node. KEYS[1] is the lock
// hash {owner, count, fence} with the lease as its PEXPIRE; KEYS[2] is the key's fencing
// counter, which has no expiry so that tokens keep increasing after the hash expired or was
// deleted. A hash whose fence is 0 was taken by the first round of an acquire that has not
// confirmed its token yet.
//
// Release, renew and inspect run the single-Redis backend's scripts (redislock.ReleaseScript,
// RenewScript, InspectScript) on every node: the per-node layout is the same on purpose.

// acquireScript is an acquire's first round: ARGV[1] owner, ARGV[2] ttl in ms. It takes a
// free key with fence 0, re-enters the owner's, or names the holder, and always reports the
// node's fencing counter, read in the same step as the take.
// Returns {status, counter, count, fence, pttl, holder}; status 1 taken, 2 re-entered, 0 held
// by holder.
var acquireScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence')
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if v[1] == false then
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, counter, 1, 0, tonumber(ARGV[2]), ''}
end
if v[1] == ARGV[1] then
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, counter, count, tonumber(v[3]), tonumber(ARGV[2]), ''}
end
return {0, counter, tonumber(v[2]), tonumber(v[3]), redis.call('PTTL', KEYS[1]), v[1]}
`)

// stampScript is an acquire's second round: ARGV[1] owner, ARGV[2] fencing token, ARGV[3]
// hold count, ARGV[4] the hold count the node reported in the first round. Only while the
// node still holds the lock for owner, it writes the token into the lock, moves the count
// from ARGV[4] to ARGV[3] (keeping holds the same owner's concurrent calls added or gave back
// since the first round, at least 1) and raises the counter to at least the token; the lease
// is left as the first round set it. Returns 1 when stamped, 0 when the owner no longer holds
// it here.
var stampScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count')
if v[1] ~= ARGV[1] then return 0 end
local count = (tonumber(v[2]) or 0) + tonumber(ARGV[3]) - tonumber(ARGV[4])
if count < 1 then count = 1 end
redis.call('HSET', KEYS[1], 'fence', ARGV[2], 'count', count)
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
`)

// dropScript undoes a take: ARGV[1] owner, ARGV[2] the attempt's token, or '*' for any. It
// deletes the hash only while owner holds it with fence 0 (unconfirmed) or ARGV[2], so it
// never removes a confirmed lease of an earlier acquire. Returns 1 when deleted.
var dropScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'fence')
if v[1] ~= ARGV[1] then return 0 end
if ARGV[2] ~= '*' and v[2] ~= '0' and v[2] ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)
