// Package clock holds the clocks coordkit times leases on and the watch that notices when
// the machine's wall clock is stepped.
//
// A lease must never end early because someone set the clock: an NTP step, a VM resumed
// from a snapshot, a bad RTC at boot. Go's time.Now carries a monotonic reading that no step
// moves, but a database's own now (SQLite's unixepoch) is the wall clock. Steady is the clock
// coordkit keeps where it stores leases itself (the embedded SQLite store): the wall clock
// read once at start, plus monotonic time elapsed since, so a step either way changes
// nothing. Where a backend keeps its own clock (Redis, MySQL), Watch only notices steps of
// this process's clock and reports them.
package clock

import (
	"sync"
	"time"
)

// Source is a machine clock: the wall clock, which can be stepped, and the monotonic clock,
// which cannot.
type Source interface {
	// Wall is the wall clock's time, without a monotonic reading.
	Wall() time.Time
	// Mono is the monotonic clock: the time elapsed since a fixed, arbitrary origin.
	Mono() time.Duration
}

// System is the process's own clocks (time.Now): CLOCK_REALTIME and CLOCK_MONOTONIC.
var System Source = system{origin: time.Now()}

type system struct{ origin time.Time }

func (system) Wall() time.Time       { return time.Now().Round(0) }
func (s system) Mono() time.Duration { return time.Since(s.origin) }

// Steady is a wall-clock time that only the monotonic clock advances: the Source's wall
// time when Steady was made, plus the monotonic time elapsed since. It agrees with the wall
// clock until the wall clock is stepped, and then keeps its course (slewing by NTP, which
// moves the wall clock by at most 0.05%, is not followed either). The monotonic clock of
// Linux stops while the machine is suspended, so after a suspend Steady runs behind the wall
// clock by the suspended time: leases timed on it then last longer, never shorter.
type Steady struct {
	src   Source
	wall0 time.Time
	mono0 time.Duration
}

// NewSteady starts a Steady clock on src at src's wall time.
func NewSteady(src Source) *Steady {
	return &Steady{src: src, wall0: src.Wall(), mono0: src.Mono()}
}

// Now is the Steady time, without a monotonic reading.
func (s *Steady) Now() time.Time { return s.wall0.Add(s.src.Mono() - s.mono0) }

// UnixMilli is Now in Unix milliseconds, truncated.
func (s *Steady) UnixMilli() int64 { return s.Now().UnixMilli() }

// Drift is how far the wall clock has moved from the Steady time (wall − steady): 0 while
// nobody stepped it, +1h after a step forward of an hour.
func (s *Steady) Drift() time.Duration { return s.src.Wall().Sub(s.Now()) }

// process is the clock every embedded store of the process times leases on.
var process = sync.OnceValue(func() *Steady { return NewSteady(System) })

// Process is the process's Steady clock on System, started at the first call: every
// embedded store of the process shares it, so they agree with each other.
func Process() *Steady { return process() }

// Fake is a Source for tests: its wall clock can be stepped apart from its monotonic clock.
// Safe for concurrent use.
type Fake struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

// NewFake returns a Fake whose wall clock reads wall and monotonic clock 0.
func NewFake(wall time.Time) *Fake { return &Fake{wall: wall.Round(0)} }

// Wall implements Source.
func (f *Fake) Wall() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wall
}

// Mono implements Source.
func (f *Fake) Mono() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

// Advance lets d pass: both clocks move by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall, f.mono = f.wall.Add(d), f.mono+d
}

// Step sets the wall clock by d (forward if positive, back if negative); the monotonic clock
// does not move.
func (f *Fake) Step(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(d)
}
