package lock

import (
	"container/list"
	"slices"
	"sync"
	"time"
)

// waiters is an instance's local line of blocked Acquires per (backend, key). A release or
// expiry wakes only the head of a line, so a release costs one backend attempt per instance
// with waiters, not one per waiter. A waiter joins its line BEFORE its attempt that may find
// the lock taken, so a release between that answer and the wait still finds it in line.
type waiters struct {
	mu    sync.Mutex
	lines map[lineKey]*line
}

type lineKey struct{ backend, key string }

type line struct {
	q *list.List // of *waiter, first come first
	// ended holds the fencing tokens of the last leases this instance itself ended (its
	// own releases, expiries and takeovers, which woke the head directly): their echo on
	// NATS wakes nobody again. Only this instance's own knowledge goes in: an event
	// received over NATS never marks a token, whoever sent it, so no event content can make
	// the line ignore a genuine end it has not seen yet (a forged `released` carrying the
	// next holder's token costs one attempt, never that holder's real release).
	ended recent
	// nudged likewise holds the tokens of leases whose expiry a waiter's timer reported:
	// several timers fire for one lease. It is kept apart from ended because a timer only
	// guesses (the holder may have renewed), and its guess must not swallow the real release.
	nudged recent
}

// recent is a small set of the last fencing tokens seen.
type recent [4]uint64

// add records tok and reports whether it was new.
func (r *recent) add(tok uint64) bool {
	for _, t := range r {
		if t == tok {
			return false
		}
	}
	copy(r[1:], r[:len(r)-1])
	r[0] = tok
	return true
}

// waiter is one blocked Acquire in a line.
type waiter struct {
	key  lineKey
	elem *list.Element
	// wake asks the waiter to make an attempt now (the lock may be free).
	wake chan struct{}
	// hint tells a waiter that just became the head when the new holder's lease ends, so it
	// arms its expiry timer for a holder it has not seen itself.
	hint chan time.Time
	// arrival is a fair waiter's number in the backend's line (0 until its first attempt,
	// and outside fair mode); guarded by waiters.mu.
	arrival int64
}

func newWaiters() *waiters { return &waiters{lines: map[lineKey]*line{}} }

// join puts a new waiter at the end of the line of (backend, key).
func (ws *waiters) join(backend, key string) *waiter {
	k := lineKey{backend, key}
	w := &waiter{key: k, wake: make(chan struct{}, 1), hint: make(chan time.Time, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.lines[k]
	if l == nil {
		l = &line{q: list.New()}
		ws.lines[k] = l
	}
	w.elem = l.q.PushBack(w)
	return w
}

// leave takes w out of its line. The next waiter, now the head, is told what it needs:
// when w acquired (got is true) the new holder's expiry, so it can wait for that lease's end;
// otherwise (w gave up) it is woken, since a wake meant for w may have gone unused.
func (ws *waiters) leave(w *waiter, got bool, holderExpiry time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.lines[w.key]
	if l == nil || w.elem == nil {
		return
	}
	wasHead := l.head() == w
	l.q.Remove(w.elem)
	w.elem = nil
	if l.q.Len() == 0 {
		delete(ws.lines, w.key)
		return
	}
	if !wasHead {
		return
	}
	next := l.head()
	if got {
		select {
		case <-next.hint:
		default:
		}
		next.hint <- holderExpiry
		return
	}
	signal(next.wake)
}

// wakeHead wakes the head of (backend, key)'s line because this instance ended the lease
// with token; it remembers token so the event's echo wakes nobody (see heard). It reports
// whether a waiter was woken.
func (ws *waiters) wakeHead(backend, key string, token uint64) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.lines[lineKey{backend, key}]
	if l == nil || token != 0 && !l.ended.add(token) {
		return false
	}
	signal(l.head().wake)
	return true
}

// heard wakes the head of (backend, key)'s line because an event received over NATS says
// the lease with token ended, unless this instance ended that lease itself (the event is
// its own echo). It marks nothing: what arrives over NATS may be forged or replayed, and
// must never stop a later event from waking the line. A token of 0 (unknown) always wakes.
// It reports whether a waiter was woken.
func (ws *waiters) heard(backend, key string, token uint64) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.lines[lineKey{backend, key}]
	if l == nil || token != 0 && slices.Contains(l.ended[:], token) {
		return false
	}
	signal(l.head().wake)
	return true
}

// nudgeHead wakes the head of w's line because w's timer says the lease with token has
// reached its expiry, once per lease and not after the lease's end already woke it.
func (ws *waiters) nudgeHead(w *waiter, token uint64) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.lines[w.key]
	if l == nil || w.elem == nil || slices.Contains(l.ended[:], token) || !l.nudged.add(token) {
		return false
	}
	signal(l.head().wake)
	return true
}

// has says whether (backend, key) has a line here.
func (ws *waiters) has(backend, key string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.lines[lineKey{backend, key}] != nil
}

// isHead says whether w is first in its line.
func (ws *waiters) isHead(w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.lines[w.key]
	return l != nil && w.elem != nil && l.head() == w
}

// setArrival records w's number in the backend's fair line, which orders the local line.
func (ws *waiters) setArrival(w *waiter, arrival int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.arrival = arrival
}

// head is the waiter whose turn is next: the lowest backend arrival number among fair
// waiters (the backend serves them in that order, which may differ from the order they
// joined here when their first attempts raced), else the first to join.
func (l *line) head() *waiter {
	var best *waiter
	for e := l.q.Front(); e != nil; e = e.Next() {
		w := e.Value.(*waiter)
		if w.arrival == 0 {
			continue
		}
		if best == nil || w.arrival < best.arrival {
			best = w
		}
	}
	if best != nil {
		return best
	}
	return l.q.Front().Value.(*waiter)
}

// wakeAllHeads wakes the head of every line: events may have been lost (NATS was down), so
// each line checks its lock once.
func (ws *waiters) wakeAllHeads() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, l := range ws.lines {
		signal(l.head().wake)
	}
	return len(ws.lines)
}

// signal leaves one pending signal on ch (buffered 1); a pending one absorbs the next.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
