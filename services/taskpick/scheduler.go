package taskpick

import (
	"context"
	"time"
)

// Scheduler defaults.
const (
	// DefaultScheduleInterval is how often each instance fires due schedules by default: well
	// under a second, so "@every 1s" schedules fire every second.
	DefaultScheduleInterval = 250 * time.Millisecond
	// DefaultScheduleGrace is how late a tick may fire and still count as on time; older
	// ticks were missed (see Missed).
	DefaultScheduleGrace = time.Minute
	// scheduleBatch bounds the schedules one FireDue call fires (one transaction on SQL).
	scheduleBatch = 100
	// scheduleRounds bounds the FireDue calls of one pass, so a storm of due schedules is
	// worked off a bounded batch at a time without one pass running forever.
	scheduleRounds = 100
)

// scheduleLoop fires b's due schedules every interval until ctx ends. Every instance runs
// one; the backends make two instances firing one tick put one task.
func (s *Service) scheduleLoop(ctx context.Context, name string, b Backend, interval time.Duration) {
	s.every(ctx, name, interval, "firing schedules failed; due ticks wait for the backend", "firing schedules works again", func() error {
		return s.fireDue(ctx, name, b)
	})
}

// fireDue fires b's schedules due by the service's clock, a batch at a time, until none is
// left: a schedule some ticks behind (within the grace) catches up in one pass.
func (s *Service) fireDue(ctx context.Context, name string, b Backend) error {
	now := s.now()
	plan := func(sc Schedule) Fire {
		c, err := storedSpec(sc)
		if err != nil { // stored by a version that read specs differently: stop it, loudly
			s.log.Error("schedule spec no longer parses; the schedule stops", "backend", name, "pool", sc.Pool, "schedule", sc.Name, "error", err)
			return Fire{Fired: sc.NextFire}
		}
		return planFire(sc, c, now, s.grace)
	}
	for range scheduleRounds {
		fired, err := b.FireDue(ctx, now, scheduleBatch, plan)
		if err != nil {
			return err
		}
		byPool := map[string]int{}
		for _, f := range fired {
			if f.Created {
				byPool[f.Pool]++
			}
		}
		for pool, n := range byPool {
			s.count(name, "scheduled", n)
			s.announce(name, pool, n)
		}
		if len(fired) == 0 {
			return nil // nothing (more) due, or other instances fire it
		}
	}
	return nil
}

// storedSpec parses a stored schedule's spec in its zone.
func storedSpec(sc Schedule) (cronSpec, error) {
	loc, err := loadZone(sc.Timezone)
	if err != nil {
		return cronSpec{}, err
	}
	return compileSpec(sc.Spec, loc)
}

// now reads the schedules' clock (time.Now for a Service not made by NewService).
func (s *Service) now() time.Time {
	if s.clock == nil {
		return time.Now()
	}
	return s.clock()
}
