package redislock

import (
	"strconv"
	"strings"

	"github.com/coordkit/coordkit/libs/redisslot"
)

// The key layout, shared with the redlock backend on every one of its nodes:
//
//	<prefix>:{<key>}                 the lock hash {owner, count, fence, ttl, holder, ...}; its PEXPIRE
//	                                 is the lease, so a free key leaves nothing behind
//	<prefix>:fence-bucket:{<tag>}    a fencing counter shared by every key of one Cluster slot
//	<prefix>:lease:{<tag>}<key>      "<fence>/<holder id>" of the lease, while it lives and for
//	                                 ExpiryGrace after it ran out unreleased: what tells an
//	                                 expiry from a release, until someone reports it
//	<prefix>:queue:{<tag>}<key>      fair waiters by arrival (sorted set), while any wait
//	<prefix>:queue-deadlines:{<tag>}<key>  their entry deadlines (hash), likewise
//
// Fencing tokens come from the counter of the lock hash's slot, raised with INCR by every new
// holder and never expiring. A key's successive holders all draw from the same counter, so
// their tokens strictly increase, while storage stays bounded by the live locks plus at most
// 16384 counters per prefix: no per-key state outlives a lease by more than ExpiryGrace. The counter's name carries a
// hash tag chosen to land in the lock hash's slot, so both keys of a script are in one slot
// whatever the key contains, and the scripts run unchanged on Redis Cluster.

// Layout names the keys of one prefix.
type Layout struct {
	prefix string
}

// NewLayout returns the layout under prefix. A prefix must not contain braces: a brace in it
// would move the hash tag of every key, and with it the slot math.
func NewLayout(prefix string) Layout {
	if strings.ContainsAny(prefix, "{}") {
		panic("redislock: a key prefix must not contain '{' or '}': " + strconv.Quote(prefix))
	}
	return Layout{prefix: prefix}
}

// Keys returns the lock hash of key and the fencing counter of its slot: KEYS[1] and KEYS[2]
// of every script.
func (l Layout) Keys(key string) []string {
	hash, tag := l.hashAndTag(key)
	return []string{hash, l.fenceKey(tag)}
}

// LeaseKey returns the key that remembers key's lease after its hash expired, until its
// expiry is reported (see ExpiryGrace); its hash tag lands in the lock hash's slot.
func (l Layout) LeaseKey(key string) string {
	_, tag := l.hashAndTag(key)
	return l.leaseKey(tag, key)
}

// QueueKeys returns the keys of key's line of fair waiters: a sorted set of owners by
// arrival and a hash of each owner's entry deadline (plus the arrival counter). Their hash
// tag lands in the lock hash's slot, so a script may touch all four keys on Redis Cluster.
// They exist only while someone waits in fair mode, and expire with the last entry.
func (l Layout) QueueKeys(key string) []string {
	_, tag := l.hashAndTag(key)
	return []string{l.prefix + ":queue:" + tag + key, l.prefix + ":queue-deadlines:" + tag + key}
}

// hashAndTag returns key's lock hash and the hash tag ({...}) of its slot, which every other
// key of key carries: the one place the slot is hashed, once per call.
func (l Layout) hashAndTag(key string) (hash, tag string) {
	hash = l.prefix + ":{" + key + "}"
	return hash, "{" + slotTag(Slot(hash)) + "}"
}

// fenceKey is the fencing counter of the slot whose hash tag is tag.
func (l Layout) fenceKey(tag string) string { return l.prefix + ":fence-bucket:" + tag }

// leaseKey is LeaseKey of key, whose slot's hash tag is tag.
func (l Layout) leaseKey(tag, key string) string { return l.prefix + ":lease:" + tag + key }

// Slot is the Redis Cluster hash slot of a key name (see libs/redisslot).
func Slot(name string) int { return redisslot.Of(name) }

// slotTag returns a hash tag that maps to slot.
func slotTag(slot int) string { return redisslot.Tag(slot) }
