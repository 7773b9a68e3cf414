package zklock

import (
	"sync"
	"time"
)

// A lease ends ttl after its node's mtime, which the ZooKeeper leader stamps from its own wall
// clock. No instance may compare that with its own wall clock: clocks differ, and stepping one
// would end leases early. serverClock instead keeps one sample (the mtime of a node this
// process wrote, and the monotonic instant the write's reply arrived) and extrapolates with
// the monotonic clock. The leader stamped the mtime before the reply left, so the sample is a
// lower bound of the leader's clock, and so is every extrapolation: leases are only ever
// judged expired late (by the sample's round trip at most), never early.

// clockFresh is how long a sample is preferred over a later, less precise one.
const clockFresh = 10 * time.Second

// serverClock estimates the ZooKeeper leader's clock from below.
type serverClock struct {
	mu     sync.Mutex
	ok     bool
	at     time.Time     // local monotonic instant the sample's reply arrived
	mtime  int64         // the leader's clock in the sample, Unix ms
	spread time.Duration // request to reply: how far the sample may lag the leader
}

// observe records that a write sent at sent and answered at received was stamped mtime.
// The latest sample wins, so the estimate follows a leader whose clock was stepped; only a
// much noisier sample (a slow round trip under load) does not replace a fresh, tight one.
func (c *serverClock) observe(sent, received time.Time, mtime int64) {
	spread := received.Sub(sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && spread > 4*c.spread+time.Millisecond && received.Sub(c.at) < clockFresh {
		return
	}
	c.ok, c.at, c.mtime, c.spread = true, received, mtime, spread
}

// lastSample is when the current sample was taken (zero before the first).
func (c *serverClock) lastSample() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

// serverNow is a lower bound of the leader's clock at the local instant now, in Unix ms.
func (c *serverClock) serverNow(now time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mtime + now.Sub(c.at).Milliseconds()
}

// left is how long, from now, until the node ends by its ttl (negative when it has).
func (c *serverClock) left(now time.Time, e *entry) time.Duration {
	return time.Duration(e.stat.Mtime+e.data.TTLms-c.serverNow(now)) * time.Millisecond
}

// expired reports whether the node's ttl has certainly passed on the leader's clock.
func (c *serverClock) expired(now time.Time, e *entry) bool {
	return c.left(now, e) < 0
}
