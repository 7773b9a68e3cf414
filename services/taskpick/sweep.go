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
		for {
			rec, err := b.Sweep(ctx, sweepLimit)
			if err != nil {
				if ctx.Err() == nil && !failing {
					s.log.Warn("task sweep failed; expired leases wait for the backend", "backend", name, "error", err)
				}
				failing = ctx.Err() == nil && !server.Ended(err)
				break
			}
			if failing {
				s.log.Info("task sweep works again", "backend", name)
				failing = false
			}
			total := 0
			for _, r := range rec {
				s.metrics.recovered.WithLabelValues(name, "available").Add(float64(r.Available))
				s.metrics.recovered.WithLabelValues(name, "dead").Add(float64(r.Dead))
				s.announce(name, r.Pool, r.Available+r.Due)
				total += r.Available + r.Dead
			}
			if total < sweepLimit {
				break
			}
		}
	}
}
