package taskpick

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/coordkit/coordkit/libs/server"
)

// Limits of schedules.
const (
	// MaxScheduleNameBytes is the longest schedule name: a task id of the name, "@" and a
	// tick stays within server.MaxKeyBytes.
	MaxScheduleNameBytes = 256
	// MaxSpecBytes is the longest cron spec.
	MaxSpecBytes = 256
	// MaxTimezoneBytes is the longest time zone name (the IANA names are at most 32).
	MaxTimezoneBytes = 64
	// MaxListSchedules is the most schedules one ListSchedules returns; DefaultListSchedules
	// is used for 0.
	MaxListSchedules = 1000
	// DefaultListSchedules is ListSchedules' limit when none is asked for.
	DefaultListSchedules = 100
)

// specParser reads 5 fields, or 6 with a leading seconds field, and the descriptors
// (@hourly, @every 30s …).
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronSpec is a parsed spec in its time zone.
type cronSpec struct {
	sched cron.Schedule
	loc   *time.Location
}

// parseSpec parses a schedule's spec in timezone (empty: UTC). The errors are invalid_argument
// naming spec or timezone. A spec with no tick within five years of now is refused: it would
// never fire.
func parseSpec(spec, timezone string, now time.Time) (cronSpec, error) {
	loc, err := loadZone(timezone)
	if err != nil {
		return cronSpec{}, err
	}
	c, err := compileSpec(spec, loc)
	if err != nil {
		return cronSpec{}, err
	}
	if c.next(now).IsZero() {
		return cronSpec{}, server.InvalidField("spec", "%s has no tick in the next five years: it would never fire", server.Quote(spec))
	}
	return c, nil
}

// loadZone is the IANA zone name; empty is UTC. "Local" is refused: it would mean a
// different zone on every instance.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if len(name) > MaxTimezoneBytes {
		return nil, server.InvalidField("timezone", "is %d bytes, the limit is %d: name an IANA zone such as \"Europe/Berlin\"", len(name), MaxTimezoneBytes)
	}
	if name == "Local" {
		return nil, server.InvalidField("timezone", "\"Local\" differs between instances: name an IANA zone such as \"Europe/Berlin\", or leave it empty for UTC")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, server.InvalidField("timezone", "%s is not an IANA time zone: %v", server.Quote(name), err)
	}
	return loc, nil
}

// compileSpec parses spec with the cron parser, in loc.
func compileSpec(spec string, loc *time.Location) (cronSpec, error) {
	switch {
	case strings.TrimSpace(spec) == "":
		return cronSpec{}, server.InvalidField("spec", "is empty: give a cron spec such as \"*/5 * * * *\" or \"@every 30s\"")
	case len(spec) > MaxSpecBytes:
		return cronSpec{}, server.InvalidField("spec", "is %d bytes, the limit is %d", len(spec), MaxSpecBytes)
	case strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ="):
		return cronSpec{}, server.InvalidField("spec", "names its time zone: pass it in the timezone field instead")
	}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		// The parser would round a sub-second or fractional interval silently.
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err == nil && (every < time.Second || every%time.Second != 0) {
			return cronSpec{}, server.InvalidField("spec", "%s: the interval must be a whole number of seconds, at least 1s", server.Quote(spec))
		}
	}
	s, err := specParser.Parse(spec)
	if err != nil {
		return cronSpec{}, server.InvalidField("spec", "%s is not a cron spec: %v", server.Quote(spec), err)
	}
	if cs, ok := s.(*cron.SpecSchedule); ok {
		cs.Location = loc
	}
	return cronSpec{sched: s, loc: loc}, nil
}

// next is the first tick strictly after t (in UTC), or zero when there is none.
func (c cronSpec) next(t time.Time) time.Time {
	n := c.sched.Next(t.In(c.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// planFire decides what firing s, due at now, does. A tick less than grace late fires as usual
// and the schedule moves to the tick after it (the next pass fires that one too when it is
// also due, so a short stall catches up tick by tick). An older tick was missed: the
// schedule moves to its first tick that is not missed, firing one task for all the missed
// ones under MissedRunOnce and none under MissedSkip.
func planFire(s Schedule, c cronSpec, now time.Time, grace time.Duration) Fire {
	t := s.NextFire
	if now.Sub(t) < grace {
		return Fire{Fired: t, Next: c.next(t), Task: scheduledTask(s, t)}
	}
	f := Fire{Fired: t, Next: c.next(now.Add(-grace))}
	if s.Missed == MissedRunOnce {
		f.Task = scheduledTask(s, t)
	}
	return f
}

// scheduledTask is the task s puts for tick: its id is derived from the schedule's name and
// the tick, so a fire that is retried, or raced by another instance, puts no second task.
func scheduledTask(s Schedule, tick time.Time) *NewTask {
	return &NewTask{ID: ScheduledTaskID(s.Name, tick), Payload: s.Payload, Priority: s.Priority, MaxAttempts: s.MaxAttempts}
}

// ScheduledTaskID is the id of the task the schedule named name puts for tick:
// "<name>@<tick in RFC 3339, UTC>".
func ScheduledTaskID(name string, tick time.Time) string {
	return name + "@" + tick.UTC().Format(time.RFC3339)
}
