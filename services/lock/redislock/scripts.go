package redislock

import "github.com/redis/go-redis/v9"

// Every operation is one Lua script, so each is atomic on the Redis server: no SETNX then
// EXPIRE, no GET then DEL. KEYS[1] is the lock hash {owner, count, fence} with the lease as its
// PEXPIRE; KEYS[2] is the key's fencing counter, which has no expiry so that tokens keep
// increasing across holders even after the lock hash expired or was deleted. Both keys share
// a hash tag, so the scripts also run on Redis Cluster.

// acquireScript: ARGV[1] owner, ARGV[2] ttl in ms.
// Returns {acquired (1|0), fence, count, ttl or holder's pttl in ms, holder owner or ""}.
var acquireScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence')
if v[1] == false then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', fence)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence, 1, tonumber(ARGV[2]), ''}
end
if v[1] == ARGV[1] then
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(v[3]), count, tonumber(ARGV[2]), ''}
end
return {0, tonumber(v[3]), tonumber(v[2]), redis.call('PTTL', KEYS[1]), v[1]}
`)

// ReleaseScript drops one hold on one node: ARGV[1] owner. Returns holds left, -1 when not
// held, -2 for another owner. Exported for the redlock backend, which keeps the same
// per-node layout and runs it on every node.
var ReleaseScript = redis.NewScript(`
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == false then return -1 end
if owner ~= ARGV[1] then return -2 end
local count = redis.call('HINCRBY', KEYS[1], 'count', -1)
if count <= 0 then
  redis.call('DEL', KEYS[1])
  return 0
end
return count
`)

// RenewScript extends the owner's lease on one node: ARGV[1] owner, ARGV[2] ttl in ms.
// Returns {1, fence, count}, {-1} when not held, {-2} for another owner. Shared with redlock.
var RenewScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence')
if v[1] == false then return {-1} end
if v[1] ~= ARGV[1] then return {-2} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, tonumber(v[3]), tonumber(v[2])}
`)

// InspectScript reads one node's lock: {0} when free, else {1, fence, count, pttl, owner}.
// Shared with redlock.
var InspectScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence')
if v[1] == false then return {0} end
return {1, tonumber(v[3]), tonumber(v[2]), redis.call('PTTL', KEYS[1]), v[1]}
`)
