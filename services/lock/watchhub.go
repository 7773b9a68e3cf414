package lock

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protojson"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/subject"
	"github.com/coordkit/coordkit/libs/server"
)

// watchHub fans lock events out to the Watch streams of this instance. Watchers share one
// NATS subscription per subject: one per watched key, and one per backend for every prefix
// watcher of it. So an event crosses the instance's NATS connection once, however many
// watchers see it (with a subscription per watcher, 2,000 prefix watchers made the server
// write each event 2,000 times to the instance's one connection, which it then dropped as a
// slow consumer, losing the waiters' wake-ups with the watchers' events). The subscription's
// callback decodes each event once and hands it to every matching watcher's bounded queue
// without ever waiting: a watcher whose queue is full is marked lagged and its stream ends
// with resource_exhausted, and nothing a watcher does slows the callback, the other watchers
// or the waiters' own subscriptions.
type watchHub struct {
	s    *Service
	mu   sync.Mutex
	subs map[string]*hubSub // by NATS subject
}

// hubSub is one shared subscription and the watchers it feeds.
type hubSub struct {
	unsubscribe func() error
	watchers    atomic.Pointer[[]*watcher] // replaced, never changed, under watchHub.mu
}

// watcher is one Watch stream's queue.
type watcher struct {
	ctx          context.Context // the Watch request's
	backend, key string          // key, or with prefix set every key starting with it
	prefix       bool
	events       chan *lockv1.LockEvent // shared read-only with the other watchers
	lagged       chan struct{}          // closed when events overflowed the queue
	overflowed   atomic.Bool
}

func newWatchHub(s *Service) *watchHub { return &watchHub{s: s, subs: map[string]*hubSub{}} }

// join adds w to its subject's subscription, subscribing when it is the first, and returns
// the function that removes it (and unsubscribes after the last).
func (h *watchHub) join(w *watcher) (leave func(), err error) {
	subj := subject.LockPattern("*", w.backend)
	if !w.prefix {
		subj = subject.Lock("*", w.backend, w.key)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	hs := h.subs[subj]
	if hs == nil {
		hs = &hubSub{}
		hs.watchers.Store(&[]*watcher{})
		backend := w.backend
		hs.unsubscribe, err = h.s.bus.Subscribe(subj, func(subj string, data []byte) { h.deliver(hs, backend, subj, data) })
		if err != nil {
			return nil, err
		}
		h.subs[subj] = hs
	}
	cur := *hs.watchers.Load()
	next := make([]*watcher, len(cur), len(cur)+1)
	copy(next, cur)
	next = append(next, w)
	hs.watchers.Store(&next)
	return func() { h.leave(subj, hs, w) }, nil
}

func (h *watchHub) leave(subj string, hs *hubSub, w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := *hs.watchers.Load()
	next := make([]*watcher, 0, len(cur))
	for _, x := range cur {
		if x != w {
			next = append(next, x)
		}
	}
	hs.watchers.Store(&next)
	if len(next) == 0 && h.subs[subj] == hs {
		delete(h.subs, subj)
		_ = hs.unsubscribe() // the connection may be gone; nothing to do then
	}
}

// deliver runs on the subscription's delivery goroutine for each message: it checks and
// decodes the event once, lets the expiry tracker hear of it, and queues it for every
// watcher it concerns, without blocking.
func (h *watchHub) deliver(hs *hubSub, backend, subj string, data []byte) {
	watchers := *hs.watchers.Load()
	if len(watchers) == 0 {
		return
	}
	_, b, key, ok := subject.ParseLock(subj)
	if !ok || b != backend {
		return
	}
	ev := &lockv1.LockEvent{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, ev); err != nil || ev.GetKey() != key || ev.GetBackend() != backend {
		return // not an event of ours: someone else published on our subject
	}
	tracked := false
	for _, w := range watchers {
		if w.prefix && !strings.HasPrefix(key, w.key) || !w.prefix && w.key != key || w.overflowed.Load() {
			continue
		}
		if !tracked {
			tracked = true
			if ev.GetKind() == lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED {
				h.s.trackExpiry(backend, key, State{Held: true, FencingToken: ev.GetFencingToken(), ExpiresAt: ev.GetExpiresAt().AsTime()})
			} else {
				h.s.untrackExpiry(backend, key, ev.GetFencingToken())
			}
		}
		select {
		case w.events <- ev:
		default:
			if !w.overflowed.Swap(true) {
				close(w.lagged)
				h.s.metrics.watchLagged.WithLabelValues(backend).Inc()
				// The stream ends at its next turn, unless it is stuck in a Send to a
				// client that stopped reading: that one gets a grace to read, then is cut.
				go server.CutStream(w.ctx, h.s.lagGrace)
			}
		}
	}
}
