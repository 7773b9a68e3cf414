package redislock

import (
	"strconv"
	"strings"
	"sync"
)

// The key layout, shared with the redlock backend on every one of its nodes:
//
//	<prefix>:{<key>}                 the lock hash {owner, count, fence, ttl, ...}; its PEXPIRE
//	                                 is the lease, so a free key leaves nothing behind
//	<prefix>:fence-bucket:{<tag>}    a fencing counter shared by every key of one Cluster slot
//	<prefix>:lease:{<tag>}<key>      "<fence>:<owner>" of the lease, while it lives and for
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

// slots is the number of Redis Cluster hash slots.
const slots = 16384

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
	hash := l.prefix + ":{" + key + "}"
	return []string{hash, l.prefix + ":fence-bucket:{" + slotTag(Slot(hash)) + "}"}
}

// LeaseKey returns the key that remembers key's lease after its hash expired, until its
// expiry is reported (see ExpiryGrace); its hash tag lands in the lock hash's slot.
func (l Layout) LeaseKey(key string) string {
	return l.prefix + ":lease:{" + slotTag(Slot(l.prefix+":{"+key+"}")) + "}" + key
}

// QueueKeys returns the keys of key's line of fair waiters: a sorted set of owners by
// arrival and a hash of each owner's entry deadline (plus the arrival counter). Their hash
// tag lands in the lock hash's slot, so a script may touch all four keys on Redis Cluster.
// They exist only while someone waits in fair mode, and expire with the last entry.
func (l Layout) QueueKeys(key string) []string {
	tag := "{" + slotTag(Slot(l.prefix+":{"+key+"}")) + "}"
	return []string{l.prefix + ":queue:" + tag + key, l.prefix + ":queue-deadlines:" + tag + key}
}

// Slot is the Redis Cluster hash slot of a key name: CRC16 of its hash tag (the part between
// the first '{' and the first '}' after it, when not empty) or of the whole name, modulo 16384.
func Slot(name string) int {
	if open := strings.IndexByte(name, '{'); open >= 0 {
		if end := strings.IndexByte(name[open+1:], '}'); end > 0 {
			name = name[open+1 : open+1+end]
		}
	}
	return int(crc16(name) % slots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis Cluster hashes
// keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotTags holds, for every slot, a short string whose CRC16 falls in it.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, slots)
	left := slots
	for i := 0; left > 0; i++ {
		t := strconv.FormatInt(int64(i), 36)
		if s := crc16(t) % slots; tags[s] == "" {
			tags[s] = t
			left--
		}
	}
	return tags
})

// slotTag returns a hash tag that maps to slot.
func slotTag(slot int) string { return slotTags()[slot] }
