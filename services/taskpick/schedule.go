package taskpick

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/server"
)

// ErrScheduleNotFound means the schedule does not exist in the pool. Its code is not_found.
var ErrScheduleNotFound = server.NewError(connect.CodeNotFound, "taskpick: no such schedule")

// Missed says what a schedule does with ticks that no instance fired within the grace.
type Missed int

// Missed-tick policies.
const (
	// MissedSkip fires nothing for missed ticks.
	MissedSkip Missed = iota + 1
	// MissedRunOnce fires one task for all the missed ticks together.
	MissedRunOnce
)

// Schedule is a stored schedule: a cron spec that puts one task from its template on every
// tick.
type Schedule struct {
	Pool, Name string
	// Spec is the cron spec as put; Timezone the IANA zone it is read in.
	Spec, Timezone string
	// The template of every task the schedule puts.
	Payload     []byte
	Priority    int32
	MaxAttempts uint32
	Missed      Missed
	Paused      bool
	// NextFire is the next tick to fire; zero while paused or when the spec has no tick left.
	NextFire time.Time
	// LastFire is the last tick fired (or skipped as missed); zero before the first.
	LastFire time.Time
}

// Fire is what one due schedule's fire does, as the service planned it: advance the
// schedule from the NextFire it was read with to Next (zero: no tick left), record Fired as
// its last fire, and put Task (nil: put nothing, as for skipped ticks) in its pool. A backend
// applies a Fire in one atomic step, and only while the schedule's next fire is still the one
// it was planned from: two instances firing one tick put one task.
type Fire struct {
	Next  time.Time
	Fired time.Time
	Task  *NewTask
}

// Fired reports one applied Fire.
type Fired struct {
	Pool, Name string
	// Created says whether the fire's task was added to the pool (false for a skipped tick,
	// or when a task of that id existed).
	Created bool
}

// ScheduleStore is the schedule half of a Backend. Schedules live in the backend, not in
// any instance, and every call is atomic on its own.
type ScheduleStore interface {
	// PutSchedule creates s, or replaces the schedule of its pool and name, keeping that
	// one's paused state and last fire (a paused schedule stays paused, with no next fire),
	// and its next fire when its spec and zone are s's (a tick due and not fired yet stays due).
	// It returns the schedule as stored and whether it was created.
	PutSchedule(ctx context.Context, s Schedule) (stored Schedule, created bool, err error)
	// GetSchedule reads a schedule, or ErrScheduleNotFound.
	GetSchedule(ctx context.Context, pool, name string) (Schedule, error)
	// ListSchedules returns up to limit of pool's schedules whose names sort after after,
	// in byte order of their names.
	ListSchedules(ctx context.Context, pool, after string, limit int) ([]Schedule, error)
	// PauseSchedule pauses a schedule (no next fire) and returns it.
	PauseSchedule(ctx context.Context, pool, name string) (Schedule, error)
	// ResumeSchedule un-pauses a paused schedule with the next fire next computes from it as
	// stored, in the same atomic step; a running schedule is returned unchanged.
	ResumeSchedule(ctx context.Context, pool, name string, next func(Schedule) time.Time) (Schedule, error)
	// DeleteSchedule deletes a schedule, or answers ErrScheduleNotFound.
	DeleteSchedule(ctx context.Context, pool, name string) error
	// FireDue fires up to limit running schedules of any pool whose next fire is at or
	// before now, earliest first, each as plan says, and reports the fires it applied. A
	// schedule another instance fired meanwhile is left alone.
	FireDue(ctx context.Context, now time.Time, limit int, plan func(Schedule) Fire) ([]Fired, error)
}
