package taskpick

import (
	"context"
	"time"

	"github.com/coordkit/coordkit/libs/server"
)

// sweepLimit bounds the leases one sweep call recovers; a backlog takes several sweeps.
const sweepLimit = 1000

// sweepLoop recovers b's expired leases every interval until ctx ends, announcing the tasks
// that became available. Every instance sweeps; the backends make two sweeps at once safe.
func (s *Service) sweepLoop(ctx context.Context, name string, b Backend, interval time.Duration) {
	s.every(ctx, name, interval, "task sweep failed; expired leases wait for the backend", "task sweep works again", func() error {
		for {
			rec, err := b.Sweep(ctx, sweepLimit)
			if err != nil {
				return err
			}
			total := 0
			for _, r := range rec {
				s.metrics.recovered.WithLabelValues(name, "available").Add(float64(r.Available))
				s.metrics.recovered.WithLabelValues(name, "dead").Add(float64(r.Dead))
				s.announce(name, r.Pool, r.Available+r.Due)
				s.freed(ctx, name, b, r.Pool, r.Dead) // the available ones were announced
				total += r.Available + r.Dead
			}
			if total < sweepLimit {
				return nil
			}
		}
	})
}

// every runs pass every interval until ctx ends: one of the service's background loops on
// backend name. The first failure of a run of failures is logged as failed, and the pass that
// works again after it as works; the loop goes on either way. It ends s.swept's count for
// the loop.
func (s *Service) every(ctx context.Context, name string, interval time.Duration, failed, works string, pass func() error) {
	defer s.swept.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := pass(); err != nil {
			if ctx.Err() == nil && !failing {
				s.log.Warn(failed, "backend", name, "error", err)
			}
			failing = ctx.Err() == nil && !server.Ended(err)
			continue
		}
		if failing {
			s.log.Info(works, "backend", name)
			failing = false
		}
	}
}
