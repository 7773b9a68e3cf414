package taskpick

import (
	"context"
	"math"
	"sync"
	"time"
)

// Limits on Pick. A pool's MaxLeased is enforced by the backends, in the pick's atomic step;
// what the service adds is the wake-up of Picks that wait for a place: the Ack or Nack that
// frees one announces it (as a Put announces a task), so a Pick waiting on any instance tries
// again at once. To announce only for limited pools, an instance remembers for limitedTTL
// whether a pool is limited, read from its settings the first time it needs to know. A
// limit set on another instance is thus announced within limitedTTL; until then a waiting
// Pick finds its place at its recheck or at the end of the lease it waits for.
const limitedTTL = time.Second

// maxLimitedPools bounds what an instance remembers of pools' limits.
const maxLimitedPools = 4096

// limitedPools is what this instance knows of pools' limits, per (backend, pool).
type limitedPools struct {
	mu sync.Mutex
	m  map[string]limitedEntry
}

type limitedEntry struct {
	limited bool
	until   time.Time
}

func newLimitedPools() *limitedPools { return &limitedPools{m: map[string]limitedEntry{}} }

// remember notes whether pool is limited, as just read.
func (l *limitedPools) remember(backend, pool string, limited bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) >= maxLimitedPools {
		clear(l.m)
	}
	l.m[waitKey(backend, pool)] = limitedEntry{limited: limited, until: time.Now().Add(limitedTTL)}
}

// known reports what is remembered of pool, and whether it is fresh.
func (l *limitedPools) known(backend, pool string) (limited, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[waitKey(backend, pool)]
	return e.limited, ok && time.Now().Before(e.until)
}

// limited reports whether pool has a MaxLeased, from memory or its settings. When the
// settings cannot be read it says yes: a needless wake-up costs one Pick.
func (s *Service) limited(ctx context.Context, name string, b Backend, pool string) bool {
	if limited, ok := s.limits.known(name, pool); ok {
		return limited
	}
	set, _, err := b.Settings(ctx, pool)
	if err != nil {
		return true
	}
	s.limits.remember(name, pool, set.MaxLeased > 0)
	return set.MaxLeased > 0
}

// freed announces that a lease of pool ended, when the pool is limited: a waiting Pick may
// take its place.
func (s *Service) freed(ctx context.Context, name string, b Backend, pool string, n int) {
	if n > 0 && s.limited(ctx, name, b, pool) {
		s.announce(name, pool, n)
	}
}

// announceAvailable announces pool's available tasks, which wakes as many waiting Picks on
// every instance: after a change of settings that lets them lease.
func (s *Service) announceAvailable(ctx context.Context, name string, b Backend, pool string) {
	st, err := b.Stats(ctx, pool)
	if err != nil {
		return // the waiters find the tasks at their next recheck
	}
	s.announce(name, pool, int(min(st.Available, math.MaxUint32)))
}
