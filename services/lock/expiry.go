package lock

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Expiry is a lease that ran out without being released, as the engine that ended it reports
// it.
type Expiry struct {
	// Key is the lock's key.
	Key string
	// FencingToken is the token of the lease that ran out.
	FencingToken uint64
	// HolderID is the lease's holder id (see State.HolderID).
	HolderID string
}

// ExpiryReporter is implemented by engines that can tell, exactly once across every instance
// that shares the engine, that a lease ran out unreleased: the decision is one atomic step on
// the engine (a script, a row-locked transaction, a versioned delete), taken by whichever
// instance meets the lease's end first: an acquire that takes the lock over, EndExpired, the
// engine's own cleanup. The service turns each report into an expired event.
type ExpiryReporter interface {
	Backend
	// ReportExpiries sets the function the engine calls, after the step that decided it
	// committed, for each lease it ended: hook.Report. The service calls it once, before it
	// serves; reports made earlier are dropped.
	ReportExpiries(report func(Expiry))
	// EndExpired ends key's lease if its ttl has passed and reports it (unless it was
	// released, or reported already), then returns the key's state: still held with the
	// lease's token means it was renewed, and says when it now ends.
	EndExpired(ctx context.Context, key string) (State, error)
}

// ExpiryHook holds an engine's report function; engines embed it and call Report. Its zero
// value drops reports until Set.
type ExpiryHook struct{ f atomic.Pointer[func(Expiry)] }

// ReportExpiries implements ExpiryReporter's setter for the engine that embeds the hook.
func (h *ExpiryHook) ReportExpiries(report func(Expiry)) { h.f.Store(&report) }

// Report hands e to the function set, if any.
func (h *ExpiryHook) Report(e Expiry) {
	if f := h.f.Load(); f != nil && *f != nil {
		(*f)(e)
	}
}

// expiryRecheckMin keeps a lease the engine still holds past its reported expiry (its clock a
// little behind ours) from being asked about in a spin.
const expiryRecheckMin = 5 * time.Millisecond

// expiryRetry is how soon the tracker asks again after the engine failed to answer.
const expiryRetry = 250 * time.Millisecond

// expiryCallTimeout bounds one EndExpired call.
const expiryCallTimeout = 5 * time.Second

// expiryTracker ends leases at their expiry on behalf of the keys this instance cares about
// (it has waiters or watchers on them), so each such lease that runs out unreleased produces
// its expired event within moments of its end, even when nobody takes the lock over. It keeps
// one timer per key, at the earliest end it heard of: what it hears may be stale (a lease
// renewed or released since) or forged (anyone on the NATS bus can publish an acquired
// event), so a timer only makes the instance ask the engine, which answers with the truth
// (and the lease to follow next, if any). A later end never pushes an earlier timer back, so
// no event, forged or not, can keep a real lease from being checked at its end.
type expiryTracker struct {
	mu      sync.Mutex
	keys    map[lineKey]*trackedLease
	stopped bool
	full    bool // maxTrackedKeys reached; logged once per episode
}

// maxTrackedKeys bounds the tracker: keys past it are not tracked (their expiries are then
// announced by the next acquire or the engine's own cleanup), so a flood of events for
// distinct keys cannot grow an instance without limit.
const maxTrackedKeys = 100_000

// trackedLease is the lease a key's timer waits for.
type trackedLease struct {
	token uint64
	at    time.Time
	timer *time.Timer
}

func newExpiryTracker() *expiryTracker { return &expiryTracker{keys: map[lineKey]*trackedLease{}} }

// trackExpiry arms key's timer at st's expiry, unless it is already armed for an earlier
// moment, if the engine can report expiries. Waiters call it with every holder they meet,
// watchers with the state they start from and every acquired event.
func (s *Service) trackExpiry(backend, key string, st State) {
	if !st.Held || st.FencingToken == 0 {
		return
	}
	r, ok := s.backends[backend].(ExpiryReporter)
	if !ok {
		return
	}
	t := s.expiries
	k := lineKey{backend, key}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	cur := t.keys[k]
	switch {
	case cur != nil && !st.ExpiresAt.Before(cur.at):
		if st.FencingToken > cur.token {
			cur.token = st.FencingToken // the newer lease is the one to ask about
		}
		return
	case cur != nil:
		cur.timer.Stop()
	case len(t.keys) >= maxTrackedKeys:
		if !t.full {
			t.full = true
			s.log.Warn("lock: tracking the expiry of too many keys; the expiries of further keys are announced late",
				"limit", maxTrackedKeys)
		}
		return
	}
	tl := &trackedLease{token: max(st.FencingToken, tokenOf(cur)), at: st.ExpiresAt}
	tl.timer = time.AfterFunc(max(time.Until(st.ExpiresAt)+time.Millisecond, 0), func() { s.checkExpiry(r, k, tl) })
	t.keys[k] = tl
}

func tokenOf(tl *trackedLease) uint64 {
	if tl == nil {
		return 0
	}
	return tl.token
}

// untrackExpiry stops tracking key's lease once a lease with token (or a later one) ended:
// released, or its expiry announced.
func (s *Service) untrackExpiry(backend, key string, token uint64) {
	t := s.expiries
	k := lineKey{backend, key}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur := t.keys[k]; cur != nil && cur.token <= token {
		cur.timer.Stop()
		delete(t.keys, k)
	}
}

// checkExpiry is a tracked lease's timer firing: if the instance still cares about the key,
// the engine ends the lease if it ran out (reporting it, which publishes the event), or tells
// when it now ends.
func (s *Service) checkExpiry(r ExpiryReporter, k lineKey, tl *trackedLease) {
	t := s.expiries
	if !s.interested(k.backend, k.key) {
		t.forget(k, tl)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), expiryCallTimeout)
	t.mu.Lock()
	token := tl.token
	t.mu.Unlock()
	st, err := r.EndExpired(ctx, k.key)
	cancel()
	switch {
	case err != nil:
		t.rearm(k, tl, time.Now().Add(expiryRetry))
	case st.Held && st.FencingToken == token: // renewed
		t.rearm(k, tl, st.ExpiresAt)
	case st.Held: // another lease than the one heard of: follow it
		t.forget(k, tl)
		s.trackExpiry(k.backend, k.key, st)
	default:
		t.forget(k, tl)
	}
}

// rearm fires tl's timer again at at (at least expiryRecheckMin from now), if tl is still
// the key's tracked lease.
func (t *expiryTracker) rearm(k lineKey, tl *trackedLease, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped && t.keys[k] == tl {
		tl.at = at
		tl.timer.Reset(max(time.Until(at)+time.Millisecond, expiryRecheckMin))
	}
}

// forget drops k's entry if it is still tl.
func (t *expiryTracker) forget(k lineKey, tl *trackedLease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys[k] == tl {
		delete(t.keys, k)
	}
	if len(t.keys) < maxTrackedKeys/2 {
		t.full = false
	}
}

// stop stops every timer for good.
func (t *expiryTracker) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for k, tl := range t.keys {
		tl.timer.Stop()
		delete(t.keys, k)
	}
}

// interested says whether the instance has waiters or watchers on (backend, key).
func (s *Service) interested(backend, key string) bool {
	return s.waiters.has(backend, key) || s.watches.covers(backend, key)
}

// watches counts the Watch streams open on this instance, by backend and key or prefix, so
// the expiry tracker knows which keys someone watches.
type watches struct {
	mu       sync.Mutex
	keys     map[lineKey]int
	prefixes map[lineKey]int // lineKey.key holds the prefix
}

func newWatches() *watches {
	return &watches{keys: map[lineKey]int{}, prefixes: map[lineKey]int{}}
}

// add counts a watch of key (or, with prefix set, of every key starting with key) and returns
// the function that ends it.
func (w *watches) add(backend, key string, prefix bool) (remove func()) {
	m := w.keys
	if prefix {
		m = w.prefixes
	}
	k := lineKey{backend, key}
	w.mu.Lock()
	m[k]++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if m[k]--; m[k] <= 0 {
			delete(m, k)
		}
	}
}

// covers says whether a watch on this instance sees key's events.
func (w *watches) covers(backend, key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys[lineKey{backend, key}] > 0 {
		return true
	}
	for p := range w.prefixes {
		if p.backend == backend && strings.HasPrefix(key, p.key) {
			return true
		}
	}
	return false
}
