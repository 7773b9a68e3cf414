package redlock

import "github.com/redis/go-redis/v9"

// Every call to a node is one Lua script, so each is atomic on that node. The per-node layout
// is the single-Redis backend's (redislock.Layout): KEYS[1] is the lock hash {owner, count,
// fence, ttl} with the lease as its PEXPIRE, KEYS[2] the fencing counter of its slot. A hash
// with fence 0 is "pending": taken by the first round of the acquire whose random attempt id
// is in its att field, not confirmed yet; only that attempt stamps it. att stays as the
// lease's identity: every undo names the lease it counted its hold on.
//
// Counts change only by +1 (a re-entry) and −1 (a release, or the undo of a re-entry), and a
// node deletes the hash when its count reaches 0. These commute, so however the same owner's
// concurrent calls interleave on the nodes, every node that saw all of them ends at the same
// count. No script ever writes a count it read elsewhere: copying a count while calls are in
// flight makes a passing difference permanent.

// acquireScript is an acquire's first round: ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3]
// attempt id. It takes a free key (pending, att = the attempt id, which stays the lease's
// identity once confirmed), counts one more hold on any lease of the owner (confirmed or
// still pending: an acquire of the same owner between another's two rounds counts on the
// lease that is being confirmed, so that lease's counts include it once stamped), extending
// its expiry to ttl when that is later and never shortening it (a re-entry that fails must
// not cut its lease short), or changes nothing when another owner holds it. It reports the
// node's fencing counter, read in the same step as the take.
// Returns {status, counter, count, fence, pttl, holder, att}; status 1 taken, 2 re-entered
// (fence 0: a pending take), 0 held by holder (its att too, which names its holder id).
var acquireScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'att')
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if v[1] == false then
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', 0, 'ttl', ARGV[2], 'att', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, counter, 1, 0, tonumber(ARGV[2]), '', ARGV[3]}
end
if v[1] == ARGV[1] then
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('HSET', KEYS[1], 'ttl', ARGV[2])
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    pttl = tonumber(ARGV[2])
  end
  return {2, counter, count, tonumber(v[3]), pttl, '', v[4] or ''}
end
return {0, counter, tonumber(v[2]), tonumber(v[3]), redis.call('PTTL', KEYS[1]), v[1], v[4] or ''}
`)

// stampScript confirms a take in an acquire's second round: ARGV[1] owner, ARGV[2] token,
// ARGV[3] attempt id. Only while the node still holds this attempt's pending take does it
// write the token into the lock and raise the counter to at least the token; the count (the
// take's hold and any the owner's other calls counted on it since) and the lease stay as
// they are. Returns 1 when stamped, 0 when the take is gone.
var stampScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'att')
if v[1] ~= ARGV[1] or v[2] ~= '0' or v[3] ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
`)

// undoScript gives back the one hold an attempt counted on a node: ARGV[1] owner, ARGV[2]
// the identity (att) of the lease it counted it on (its own take's attempt id, or the lease
// it re-entered). Only while the node still holds that very lease does it drop one hold,
// deleting the hash at 0, so it never takes a hold off a lease that replaced it, and never
// more than its own (the owner's other calls may have counted more since). Returns 1 when
// it changed the node.
var undoScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'att')
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] then return 0 end
if redis.call('HINCRBY', KEYS[1], 'count', -1) <= 0 then
  redis.call('DEL', KEYS[1])
end
return 1
`)

// releaseScript drops one hold on one node: ARGV[1] owner, ARGV[2] the lease's fencing token
// or 0 for any. Returns {holds left, fence, att}; {-1} when the node holds no confirmed lease
// (or one with another token), {-2} for another owner. The last hold deletes the hash.
var releaseScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'att')
if v[1] == false then return {-1} end
if v[1] ~= ARGV[1] then return {-2} end
if v[2] == '0' then return {-1} end
if ARGV[2] ~= '0' and v[2] ~= ARGV[2] then return {-1} end
local count = redis.call('HINCRBY', KEYS[1], 'count', -1)
if count <= 0 then
  redis.call('DEL', KEYS[1])
  return {0, tonumber(v[2]), v[3] or ''}
end
return {count, tonumber(v[2]), v[3] or ''}
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
