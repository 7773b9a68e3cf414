package lock

import (
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/subject"
)

// startEvents subscribes the instance to the released and expired events of its backends
// (one subscription per backend and kind, whatever the number of waiters) and follows the
// bus's connection, so waiters poll while NATS is down. Its own releases wake its waiters
// directly (leaseEnded), so it subscribes to other instances' events only: on an embedded
// NATS that accepts no outside clients there are none, and it subscribes to nothing.
func (s *Service) startEvents() error {
	if s.bus == nil {
		return nil
	}
	for name := range s.backends {
		for _, kind := range []string{subject.Released, subject.Expired} {
			unsub, err := s.bus.SubscribeOthers(subject.LockPattern(kind, name), s.onEvent)
			if err != nil {
				s.stopEvents()
				return err
			}
			s.unsubs = append(s.unsubs, unsub)
		}
	}
	s.bus.OnChange(func(bool) { s.push.changed() })
	return nil
}

func (s *Service) stopEvents() {
	for _, unsub := range s.unsubs {
		_ = unsub()
	}
	s.unsubs = nil
}

// onEvent wakes the head of the local line of the key whose lease ended. The token, when
// the payload carries one, lets the line ignore the echo of a release this instance made
// itself; nothing in an event stops a later one from waking the line (see waiters.heard).
func (s *Service) onEvent(subj string, data []byte) {
	_, backend, key, ok := subject.ParseLock(subj)
	if !ok || !s.waiters.has(backend, key) {
		return // every release of the backend arrives here; most keys have no waiter here
	}
	var ev lockv1.LockEvent
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &ev); err != nil {
		ev.FencingToken = 0 // a payload we cannot read still says the lock may be free
	}
	if s.waiters.heard(backend, key, ev.GetFencingToken()) {
		s.metrics.wakeups.WithLabelValues(backend, "event").Inc()
	}
}

// leaseEnded is called after this instance released a lease for good: the local line is
// woken at once, without the round trip through NATS, and the event tells every instance.
func (s *Service) leaseEnded(kind lockv1.LockEventKind, backend, key string, token uint64, holderID string) {
	s.untrackExpiry(backend, key, token)
	if s.waiters.wakeHead(backend, key, token) {
		s.metrics.wakeups.WithLabelValues(backend, "local").Inc()
	}
	s.publish(&lockv1.LockEvent{Key: key, Backend: backend, Kind: kind, FencingToken: token, HolderId: holderID})
}

// leaseTaken announces a new holder.
func (s *Service) leaseTaken(backend string, l Lease) {
	s.publish(&lockv1.LockEvent{
		Key: l.Key, Backend: backend, Kind: lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED,
		FencingToken: l.FencingToken, HolderId: l.HolderID, ExpiresAt: timestamppb.New(l.ExpiresAt),
	})
}

// publish sends ev on its subject, stamped with the time. It never blocks the caller: the
// client buffers, and a lost event only delays waiters, whose waits are bounded without it.
func (s *Service) publish(ev *lockv1.LockEvent) {
	if s.bus == nil {
		return
	}
	subj := subject.Lock(subject.LockKind(ev.GetKind()), ev.GetBackend(), ev.GetKey())
	if !s.bus.Wanted(subj) {
		return // the embedded server has no subscriber for it (nobody watches the key)
	}
	ev.Time = timestamppb.Now()
	data := appendEventJSON(make([]byte, 0, 256), ev)
	if err := s.bus.PublishJSON(subj, data); err != nil {
		s.log.Debug("lock: event not published", "key", ev.GetKey(), "backend", ev.GetBackend(), "error", err)
	}
}

// pushState tells waiters whether events can wake them, and wakes them all when that
// changes: on a disconnect they must start polling, on a reconnect they re-check the lock
// (events may have been lost) and go back to waiting for a push.
type pushState struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next change
}

func newPushState() *pushState { return &pushState{ch: make(chan struct{})} }

// next is closed when the connection's state next changes.
func (p *pushState) next() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ch
}

func (p *pushState) changed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.ch)
	p.ch = make(chan struct{})
}

// DefaultRecheck is Config.Recheck by default.
const DefaultRecheck = time.Second

// DefaultFairEntryTTL is Config.FairEntryTTL by default: a dead instance's fair waiters
// are skipped within 5s, and each waiter renews its entry every 1.7s.
const DefaultFairEntryTTL = 5 * time.Second
