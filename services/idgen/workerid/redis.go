package workerid

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis leases worker ids on Redis: key <prefix>{workers}:<id> holds the owner with a PX
// expiry, and <prefix>{workers}:<id>:last the id's last millisecond, without expiry. The hash
// tag keeps every key in one cluster slot so that a script may scan them all.
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
}

var _ Store = (*Redis)(nil)

// NewRedis returns a store on rdb whose keys start with prefix ("coordkit:idgen:" when empty).
// The caller keeps ownership of rdb.
func NewRedis(rdb redis.UniversalClient, prefix string) *Redis {
	if prefix == "" {
		prefix = "coordkit:idgen:"
	}
	return &Redis{rdb: rdb, prefix: prefix + "{workers}:"}
}

// acquireScript takes the lowest free id in one round trip: SET NX PX is atomic per key, and
// the script runs alone, so two instances can never both get one id.
var acquireScript = redis.NewScript(`
for i = 0, tonumber(ARGV[2]) - 1 do
  local key = KEYS[1] .. i
  if redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[3]) then
    return {i, tonumber(redis.call('GET', key .. ':last') or '0')}
  end
end
return false`)

// renewScript extends the lease only while owner holds it (compare-and-set, never GET then
// SET from the client), and raises the last millisecond.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[3]) > last then redis.call('SET', KEYS[2], ARGV[3]) end
return 1`)

// releaseScript frees the lease only while owner holds it and records the millisecond it
// really issued last, which may lower the bound Renew recorded.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1`)

// Acquire implements Store.
func (r *Redis) Acquire(ctx context.Context, owner string, ttl time.Duration) (Lease, error) {
	res, err := acquireScript.Run(ctx, r.rdb, []string{r.prefix}, owner, Count, ttl.Milliseconds()).Int64Slice()
	if err == redis.Nil {
		return Lease{}, ErrNoFreeID
	}
	if err != nil {
		return Lease{}, unavailable(ctx, "redis", err)
	}
	return Lease{ID: int(res[0]), Owner: owner, LastMillis: res[1]}, nil
}

// Renew implements Store.
func (r *Redis) Renew(ctx context.Context, id int, owner string, ttl time.Duration, lastMillis int64) error {
	key := r.key(id)
	ok, err := renewScript.Run(ctx, r.rdb, []string{key, key + ":last"}, owner, ttl.Milliseconds(), lastMillis).Int()
	if err != nil {
		return unavailable(ctx, "redis", err)
	}
	if ok == 0 {
		return ErrLost
	}
	return nil
}

// Release implements Store.
func (r *Redis) Release(ctx context.Context, id int, owner string, lastMillis int64) error {
	key := r.key(id)
	if err := releaseScript.Run(ctx, r.rdb, []string{key, key + ":last"}, owner, lastMillis).Err(); err != nil {
		return unavailable(ctx, "redis", err)
	}
	return nil
}

// Close implements Store; the client belongs to the caller.
func (r *Redis) Close() error { return nil }

func (r *Redis) key(id int) string { return r.prefix + strconv.Itoa(id) }
