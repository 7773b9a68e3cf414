package event

import (
	"sync/atomic"
	"time"
)

// replayBits is how many of a sender's latest sequence numbers a subscription remembers. A
// Bus numbers and sends its messages in one order (under its publish lock) and NATS keeps
// one connection's order to each subscription, so a genuine message never arrives more than
// a few numbers behind the newest seen; one further behind is dropped as a replay, as IPsec
// and DTLS do with their anti-replay windows.
const replayBits = 1024

// maxSenders bounds how many senders one subscription remembers. Only holders of the key
// can make a sender (its messages must verify first), and a sender is forgotten once its
// newest message is older than the signature window, so the bound is reached only by more
// than maxSenders coord processes started within one window.
const maxSenders = 1024

// senderWindow is what a subscription remembers of one sender.
type senderWindow struct {
	top    uint64                  // the highest sequence number accepted
	bits   [replayBits / 64]uint64 // bit s%replayBits: s accepted, for s in (top-replayBits, top]
	lastMs int64                   // the newest send time accepted
}

// admit accepts seq unless it was accepted before or is too far behind top to tell.
func (w *senderWindow) admit(seq uint64) bool {
	bit := func(s uint64) (int, uint64) { return int(s % replayBits / 64), 1 << (s % 64) }
	switch {
	case seq > w.top:
		if seq-w.top >= replayBits {
			w.bits = [replayBits / 64]uint64{}
		} else {
			for s := w.top + 1; s < seq; s++ {
				i, m := bit(s)
				w.bits[i] &^= m
			}
		}
		w.top = seq
	case w.top-seq >= replayBits:
		return false
	default:
		if i, m := bit(seq); w.bits[i]&m != 0 {
			return false
		}
	}
	i, m := bit(seq)
	w.bits[i] |= m
	return true
}

// replayCache is one subscription's memory of the signed messages it delivered: per sender,
// a window of sequence numbers. It is used only from the subscription's delivery goroutine.
//
// A message is delivered when its send time is within window of the receiver's clock and
// its sender's number is new. A sender is forgotten once its newest accepted message is
// more than window old; any copy of its messages is then stale, so forgetting lets no replay
// through. A new subscription knows no sender yet, so it may take copies of genuine messages
// sent up to window before it started, each at most once.
type replayCache struct {
	window  time.Duration
	senders map[string]*senderWindow
	pruned  time.Time
	tracked *atomic.Int64 // the Bus's count of remembered senders, over all subscriptions
	n       atomic.Int64  // this cache's part of it
}

func newReplayCache(window time.Duration, tracked *atomic.Int64) *replayCache {
	return &replayCache{window: window, senders: map[string]*senderWindow{}, tracked: tracked}
}

// admit says whether a message whose signature verified as s may be delivered at now: ""
// if so, else why not: "stale", "replayed" or "sender_limit".
func (c *replayCache) admit(now time.Time, s signed) string {
	nowMs, w := now.UnixMilli(), c.window.Milliseconds()
	if d := nowMs - s.ms; d > w || d < -w {
		return "stale"
	}
	if now.Sub(c.pruned) > c.window {
		c.prune(nowMs)
		c.pruned = now
	}
	sw := c.senders[s.sender]
	if sw == nil {
		if len(c.senders) >= maxSenders {
			c.prune(nowMs)
			c.pruned = now
		}
		if len(c.senders) >= maxSenders {
			return "sender_limit"
		}
		sw = &senderWindow{}
		c.senders[s.sender] = sw
		c.count(1)
	}
	if !sw.admit(s.seq) {
		return "replayed"
	}
	sw.lastMs = max(sw.lastMs, s.ms)
	return ""
}

// prune forgets every sender whose newest accepted message is more than window old.
func (c *replayCache) prune(nowMs int64) {
	for id, sw := range c.senders {
		if nowMs-sw.lastMs > c.window.Milliseconds() {
			delete(c.senders, id)
			c.count(-1)
		}
	}
}

func (c *replayCache) count(d int64) {
	c.n.Add(d)
	c.tracked.Add(d)
}

// forget takes this cache's senders off the Bus's count, when its subscription ends.
func (c *replayCache) forget() { c.tracked.Add(-c.n.Swap(0)) }
