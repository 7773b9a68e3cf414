package taskpick

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/subject"
)

// Waiting Picks. A Pick with wait registers in this instance's line for its (backend, pool)
// before its first attempt, so an event between the attempt and the wait is not lost. An
// available event for n tasks wakes the first n waiters of the line; a waiter that then picks
// a full batch wakes the next one, since more may be left. Events are hints (NATS may lose
// them): a waiter also tries again at the earliest delayed task's due time, and every
// recheck interval (Config.Recheck with events, PollInterval without). A Pick of a paused
// pool waits the same way: ResumePool announces the pool's tasks, which wakes it. So does a
// Pick of a pool at its MaxLeased: the Ack or Nack that frees a place announces it (see
// limits.go), and NextDue is then the end of the earliest live lease. A limited pool's
// NextDue (that lease's end, or a rate limit's next token) is one chance for one Pick, so of
// an instance's waiters only one, the line's timer holder, sleeps until it; the others wait
// for a wake-up (or their recheck), and the holder hands the timer on when it leaves the
// line. Without that every waiter would try at every token: waiters × rate attempts a second.
const (
	// DefaultRecheck bounds how long a lost event delays a waiting Pick while events flow.
	DefaultRecheck = time.Second
	// PollInterval is how often a waiting Pick tries while there are no events.
	PollInterval = 100 * time.Millisecond
	// deadlineMargin ends a wait this long before the request's deadline, so the caller gets
	// an empty answer rather than deadline_exceeded.
	deadlineMargin = 50 * time.Millisecond
)

// availablePattern subscribes to every backend's available events.
var availablePattern = subject.TaskAvailablePattern("*")

// pick runs one Pick, waiting up to wait for a task. start is when the attempt that answered
// began: the leases it returns end no earlier than start + ttl.
func (s *Service) pick(ctx context.Context, name string, b Backend, pool string, spec PickSpec, wait time.Duration) ([]LeasedTask, time.Time, error) {
	start := time.Now()
	if wait == 0 {
		p, err := b.Pick(ctx, pool, spec)
		return p.Tasks, start, err
	}
	end := start.Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Add(-deadlineMargin).Before(end) {
		end = d.Add(-deadlineMargin)
	}
	w := s.waiters.add(name, pool)
	defer s.waiters.remove(w)
	waited := false
	for {
		start = time.Now()
		p, err := b.Pick(ctx, pool, spec)
		if err != nil || len(p.Tasks) > 0 || !start.Before(end) {
			if len(p.Tasks) == spec.N || p.Full {
				s.waiters.wake(name, pool, 1) // more may be left for the next waiter
			}
			if waited {
				s.metrics.waited.WithLabelValues(name).Observe(time.Since(w.since).Seconds())
			}
			return p.Tasks, start, err
		}
		waited = true
		next := end
		if s.bus != nil && s.bus.Connected() {
			next = minTime(next, start.Add(s.recheck))
		} else {
			next = minTime(next, start.Add(PollInterval))
		}
		if !p.Limited {
			s.waiters.holdTimer(w, false)
		}
		// paused: ResumePool's announcement wakes it; limited: one waiter holds the timer
		if !p.NextDue.IsZero() && !p.Paused && (!p.Limited || s.waiters.holdTimer(w, true)) {
			next = minTime(next, p.NextDue)
		}
		t := time.NewTimer(max(time.Until(next), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, start, context.Cause(ctx)
		case <-w.ch:
			t.Stop()
		case <-t.C:
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// announce says that n tasks of pool became available: on NATS for every instance (this one
// included), or straight to this instance's waiters without events.
func (s *Service) announce(backend, pool string, n int) {
	if n <= 0 {
		return
	}
	if s.bus != nil {
		ev := &taskpickv1.AvailableEvent{Backend: backend, Pool: pool, Count: uint32(n)}
		if err := s.bus.Publish(subject.TaskAvailable(backend, pool), ev); err == nil {
			return
		}
	}
	s.waiters.wake(backend, pool, n)
}

// onAvailable wakes this instance's waiters for an event's pool.
func (s *Service) onAvailable(subj string, data []byte) {
	backend, pool, ok := subject.ParseTaskAvailable(subj)
	if !ok {
		return
	}
	n := 1
	var ev taskpickv1.AvailableEvent
	if (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &ev) == nil && ev.GetCount() > 1 {
		n = int(min(ev.GetCount(), 1<<16))
	}
	s.waiters.wake(backend, pool, n)
}

// waiter is one waiting Pick.
type waiter struct {
	key   string
	ch    chan struct{}
	since time.Time
}

// waiters are this instance's lines of waiting Picks, per (backend, pool), and per line the
// waiter that holds its timer for a limited pool's next chance.
type waiters struct {
	mu     sync.Mutex
	lines  map[string][]*waiter
	timers map[string]*waiter
}

func newWaiters() *waiters {
	return &waiters{lines: map[string][]*waiter{}, timers: map[string]*waiter{}}
}

// holdTimer makes w its line's timer holder when want and no other waiter holds it, or
// gives it up when not want; it reports whether w holds it.
func (ws *waiters) holdTimer(w *waiter, want bool) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	h, held := ws.timers[w.key]
	switch {
	case want && (!held || h == w):
		ws.timers[w.key] = w
		return true
	case !want && h == w:
		delete(ws.timers, w.key)
	}
	return false
}

func waitKey(backend, pool string) string { return backend + "\x00" + pool }

func (ws *waiters) add(backend, pool string) *waiter {
	w := &waiter{key: waitKey(backend, pool), ch: make(chan struct{}, 1), since: time.Now()}
	ws.mu.Lock()
	ws.lines[w.key] = append(ws.lines[w.key], w)
	ws.mu.Unlock()
	return w
}

func (ws *waiters) remove(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	line := ws.lines[w.key]
	for i, x := range line {
		if x == w {
			line = append(line[:i], line[i+1:]...)
			break
		}
	}
	if len(line) == 0 {
		delete(ws.lines, w.key)
	} else {
		ws.lines[w.key] = line
	}
	if ws.timers[w.key] == w {
		// The next waiter tries at once and, still limited, takes the timer.
		delete(ws.timers, w.key)
		if len(line) > 0 {
			select {
			case line[0].ch <- struct{}{}:
			default:
			}
		}
	}
}

// wake signals the first n waiters of the line and moves them to its end, so the next event
// wakes others.
func (ws *waiters) wake(backend, pool string, n int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	key := waitKey(backend, pool)
	line := ws.lines[key]
	n = min(n, len(line))
	for _, w := range line[:n] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
	ws.lines[key] = append(line[n:], line[:n]...)
	if len(line) == 0 {
		delete(ws.lines, key)
	}
}
