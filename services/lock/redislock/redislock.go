// Package redislock is the lock backend on a single Redis (or Redis Cluster): one Lua script
// per operation, a server-side hold count for reentrancy, and fencing tokens from a per-slot
// counter raised with INCR inside the acquire script (see Layout), so a released key leaves no
// state behind.
package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/services/lock"
)

// DefaultPrefix starts every key the backend writes.
const DefaultPrefix = "coordkit:lock"

// Backend implements lock.Backend on Redis.
type Backend struct {
	lock.ExpiryHook
	rdb    redis.Scripter
	layout Layout
}

var _ lock.ExpiryReporter = (*Backend)(nil)

// ExpiryGrace is how long the lease key of a lease that ran out unreleased outlives it, for
// someone to report its expiry: an acquire that takes the lock over, or EndExpired, which the
// service calls at the lease's end while it has waiters or watchers on the key. An expiry
// nobody asked about within it goes unreported.
const ExpiryGrace = time.Minute

// Config configures a Backend; the zero value is the default.
type Config struct {
	// Prefix starts every key the backend writes; default DefaultPrefix. No braces: see
	// NewLayout.
	Prefix string
}

// New returns a backend on rdb whose keys start with cfg.Prefix. The backend does not own
// rdb: whoever made the client closes it.
//
// Make rdb with retries off (redis.Options.MaxRetries = -1): the client cannot know whether a
// script whose reply was lost ran, and running the acquire script twice would count one
// re-entry as two holds. The service reports the failure as unavailable instead and the
// caller decides.
func New(rdb redis.Scripter, cfg Config) *Backend {
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Backend{rdb: rdb, layout: NewLayout(prefix)}
}

// keys returns the lock hash, fencing counter and lease keys of key: Layout.Keys and
// Layout.LeaseKey with the key's slot hashed once.
func (b *Backend) keys(key string) []string {
	hash, tag := b.layout.hashAndTag(key)
	return []string{hash, b.layout.fenceKey(tag), b.layout.leaseKey(tag, key)}
}

// ownKeys returns the lock hash and lease keys of key.
func (b *Backend) ownKeys(key string) []string {
	hash, tag := b.layout.hashAndTag(key)
	return []string{hash, b.layout.leaseKey(tag, key)}
}

var graceMs = ExpiryGrace.Milliseconds()

// TryAcquire implements lock.Backend.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Attempt, error) {
	start := time.Now()
	return b.acquireReply(ctx, b.run(ctx, b.acquireCall(key, owner, ttl)), key, owner, start)
}

// run runs one script call, as Script.Run.
func (b *Backend) run(ctx context.Context, c redisconf.ScriptCall) *redis.Cmd {
	return c.Script.Run(ctx, b.rdb, c.Keys, c.Args...)
}

// acquireCall is the script call of an attempt on key.
func (b *Backend) acquireCall(key, owner string, ttl time.Duration) redisconf.ScriptCall {
	return redisconf.ScriptCall{Script: acquireScript, Keys: b.keys(key), Args: []any{owner, ttl.Milliseconds(), lock.MaxHoldCount, graceMs, lock.NewHolderID()}}
}

// acquireReply reads an attempt's reply; start is when the call began.
func (b *Backend) acquireReply(ctx context.Context, cmd *redis.Cmd, key, owner string, start time.Time) (lock.Attempt, error) {
	res, err := cmd.Slice()
	if err != nil {
		return lock.Attempt{}, lock.Unavailable(ctx, "redis", err)
	}
	if len(res) != 6 {
		return lock.Attempt{}, fmt.Errorf("redislock: acquire script returned %d values", len(res))
	}
	return b.attempt(res, key, owner, start)
}

// attempt reads the first six values of an acquire script's reply {status, fence, count,
// ttl or the holder's pttl in ms, holder id, ended lease}, reporting the ended lease; start
// is when the call began. A lease taken ends at start plus the whole milliseconds the script
// set it for, never the ttl asked: Redis counts whole milliseconds, so a ttl with a fraction
// of one would end before the expiry reported.
func (b *Backend) attempt(res []any, key, owner string, start time.Time) (lock.Attempt, error) {
	if ended, _ := res[5].(string); ended != "" {
		b.reportEnded(key, ended)
	}
	fence, count, ms := toInt(res[1]), toInt(res[2]), toInt(res[3])
	holder, _ := res[4].(string)
	switch toInt(res[0]) {
	case -3:
		return lock.Attempt{}, fmt.Errorf("redislock: %w (%d)", lock.ErrHoldLimit, count)
	case 1:
		return lock.Attempt{Acquired: true, Lease: lock.Lease{
			Key: key, Owner: owner, HolderID: holder, FencingToken: uint64(fence),
			ExpiresAt: start.Add(time.Duration(ms) * time.Millisecond), HoldCount: uint32(count),
		}}, nil
	case 2: // free, yet not the caller's turn (fair mode)
		return lock.Attempt{}, nil
	}
	return lock.Attempt{Holder: lock.State{
		Held: true, HolderID: holder, FencingToken: uint64(fence),
		ExpiresAt: time.Now().Add(time.Duration(ms) * time.Millisecond), HoldCount: uint32(count),
	}}, nil
}

// Release implements lock.Backend.
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) (uint32, lock.Released, error) {
	return releaseReply(ctx, b.run(ctx, b.releaseCall(key, owner, token)))
}

// releaseCall is the script call of a release.
func (b *Backend) releaseCall(key, owner string, token uint64) redisconf.ScriptCall {
	return redisconf.ScriptCall{Script: releaseScript, Keys: b.ownKeys(key), Args: []any{owner, token}}
}

// releaseReply reads a release's reply.
func releaseReply(ctx context.Context, cmd *redis.Cmd) (uint32, lock.Released, error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, lock.Released{}, lock.Unavailable(ctx, "redis", err)
	}
	if len(res) == 0 {
		return 0, lock.Released{}, fmt.Errorf("redislock: release script returned no values")
	}
	if err := statusErr(toInt(res[0])); err != nil {
		return 0, lock.Released{}, err
	}
	if len(res) != 3 {
		return 0, lock.Released{}, lock.Unavailable(ctx, "redis", fmt.Errorf("release script returned %v", res))
	}
	holder, _ := res[2].(string)
	return uint32(toInt(res[0])), lock.Released{FencingToken: uint64(toInt(res[1])), HolderID: holder}, nil
}

// Renew implements lock.Backend.
func (b *Backend) Renew(ctx context.Context, key, owner string, ttl time.Duration) (lock.Lease, error) {
	start := time.Now()
	return renewReply(ctx, b.run(ctx, b.renewCall(key, owner, ttl)), key, owner, start)
}

// renewCall is the script call of a renewal.
func (b *Backend) renewCall(key, owner string, ttl time.Duration) redisconf.ScriptCall {
	return redisconf.ScriptCall{Script: renewScript, Keys: b.ownKeys(key), Args: []any{owner, ttl.Milliseconds(), graceMs}}
}

// renewReply reads a renewal's reply; start is when the call began.
func renewReply(ctx context.Context, cmd *redis.Cmd, key, owner string, start time.Time) (lock.Lease, error) {
	res, err := cmd.Slice()
	if err != nil {
		return lock.Lease{}, lock.Unavailable(ctx, "redis", err)
	}
	if len(res) == 0 {
		return lock.Lease{}, fmt.Errorf("redislock: renew script returned no values")
	}
	if err := statusErr(toInt(res[0])); err != nil {
		return lock.Lease{}, err
	}
	if len(res) != 5 {
		return lock.Lease{}, fmt.Errorf("redislock: renew script returned %d values", len(res))
	}
	holder, _ := res[4].(string)
	return lock.Lease{
		Key: key, Owner: owner, HolderID: holder, FencingToken: uint64(toInt(res[1])),
		ExpiresAt: start.Add(time.Duration(toInt(res[3])) * time.Millisecond), HoldCount: uint32(toInt(res[2])),
	}, nil
}

// Inspect implements lock.Backend.
func (b *Backend) Inspect(ctx context.Context, key string) (lock.State, error) {
	return inspectReply(ctx, b.run(ctx, b.inspectCall(key)))
}

// inspectCall is the script call of an inspection.
func (b *Backend) inspectCall(key string) redisconf.ScriptCall {
	return redisconf.ScriptCall{Script: InspectScript, Keys: b.keys(key)[:1]}
}

// inspectReply reads an inspection's reply.
func inspectReply(ctx context.Context, cmd *redis.Cmd) (lock.State, error) {
	res, err := cmd.Slice()
	if err != nil {
		return lock.State{}, lock.Unavailable(ctx, "redis", err)
	}
	if len(res) == 0 || toInt(res[0]) != 1 {
		return lock.State{}, nil
	}
	if len(res) < 5 {
		return lock.State{}, fmt.Errorf("redislock: inspect script returned %d values", len(res))
	}
	return heldState(res[1:]), nil
}

// heldState reads {fence, count, pttl, holder id} of a held lock.
func heldState(v []any) lock.State {
	holder, _ := v[3].(string)
	return lock.State{
		Held: true, HolderID: holder, FencingToken: uint64(toInt(v[0])),
		ExpiresAt: time.Now().Add(time.Duration(toInt(v[2])) * time.Millisecond), HoldCount: uint32(toInt(v[1])),
	}
}

// EndExpired implements lock.ExpiryReporter: a lock no longer held gives up its lease key,
// whose lease ran out unreleased when it is there, and this call reports it.
func (b *Backend) EndExpired(ctx context.Context, key string) (lock.State, error) {
	res, err := endExpiredScript.Run(ctx, b.rdb, b.ownKeys(key)).Slice()
	if err != nil {
		return lock.State{}, lock.Unavailable(ctx, "redis", err)
	}
	if len(res) < 2 {
		return lock.State{}, fmt.Errorf("redislock: end-expired script returned %d values", len(res))
	}
	if toInt(res[1]) == 1 && len(res) == 6 {
		return heldState(res[2:]), nil
	}
	if ended, _ := res[0].(string); ended != "" {
		b.reportEnded(key, ended)
	}
	return lock.State{}, nil
}

// reportEnded reports the lease a lease key held: "<fence>/<holder id>", or
// "<fence>:<owner>" as older versions wrote it, whose owner is reported as unknown (no holder
// id): it may be a secret.
func (b *Backend) reportEnded(key, ended string) {
	fence, holder, ok := strings.Cut(ended, "/")
	token, err := strconv.ParseUint(fence, 10, 64)
	if !ok || err != nil {
		fence, _, _ = strings.Cut(ended, ":")
		if token, err = strconv.ParseUint(fence, 10, 64); err != nil {
			return // not written by this package
		}
		holder = ""
	}
	b.Report(lock.Expiry{Key: key, FencingToken: token, HolderID: holder})
}

// Close implements lock.Backend; the Redis client stays open for its owner to close.
func (b *Backend) Close() error { return nil }

// statusErr maps the scripts' negative status codes to lock errors.
func statusErr(n int64) error {
	switch n {
	case -1:
		return lock.ErrNotHeld
	case -2:
		return lock.ErrNotOwner
	}
	return nil
}

func toInt(v any) int64 {
	n, _ := v.(int64)
	return n
}
