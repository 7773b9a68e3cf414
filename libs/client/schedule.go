package client

import (
	"context"
	"iter"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// Schedules is the durable-schedule part of the task-pick API: cron specs stored in the
// service's backend whose every tick puts one task into a pool, once across all instances of
// the service and across their restarts. A request's backend left empty is the client's
// (WithBackend), else the service's default.
type Schedules struct{ c *Client }

// Schedules returns the schedule API.
func (c *Client) Schedules() Schedules { return Schedules{c} }

func (s Schedules) backend(b string) string {
	if b == "" {
		return s.c.backend
	}
	return b
}

// Put creates or replaces the schedule req names and returns it as stored, with its next
// tick.
//
//	s, err := c.Schedules().Put(ctx, &taskpickv1.PutScheduleRequest{
//		Pool: "reports", Name: "nightly", Spec: "0 3 * * *", Timezone: "Europe/Berlin",
//		Template: &taskpickv1.ScheduleTemplate{Payload: []byte(`{"report":"daily"}`)},
//	})
func (s Schedules) Put(ctx context.Context, req *taskpickv1.PutScheduleRequest) (*taskpickv1.Schedule, error) {
	if req.GetBackend() == "" && s.c.backend != "" {
		// A copy, leaving the caller's request alone.
		req = &taskpickv1.PutScheduleRequest{Backend: s.c.backend, Pool: req.GetPool(), Name: req.GetName(), Spec: req.GetSpec(),
			Timezone: req.GetTimezone(), Template: req.GetTemplate(), Missed: req.GetMissed()}
	}
	r, err := s.c.tasks.PutSchedule(ctx, req)
	if err != nil {
		return nil, err
	}
	return r.GetSchedule(), nil
}

// Get reads a schedule; its error's code is not_found when it does not exist.
func (s Schedules) Get(ctx context.Context, backend, pool, name string) (*taskpickv1.Schedule, error) {
	r, err := s.c.tasks.GetSchedule(ctx, &taskpickv1.GetScheduleRequest{Backend: s.backend(backend), Pool: pool, Name: name})
	if err != nil {
		return nil, err
	}
	return r.GetSchedule(), nil
}

// List yields every schedule of pool by name, asking for a page at a time; it stops at the
// first error, which it yields.
func (s Schedules) List(ctx context.Context, backend, pool string) iter.Seq2[*taskpickv1.Schedule, error] {
	return func(yield func(*taskpickv1.Schedule, error) bool) {
		after := ""
		for {
			r, err := s.c.tasks.ListSchedules(ctx, &taskpickv1.ListSchedulesRequest{Backend: s.backend(backend), Pool: pool, After: after})
			if err != nil {
				yield(nil, err)
				return
			}
			for _, sc := range r.GetSchedules() {
				if !yield(sc, nil) {
					return
				}
			}
			if after = r.GetNextAfter(); after == "" {
				return
			}
		}
	}
}

// Pause stops a schedule firing until Resume.
func (s Schedules) Pause(ctx context.Context, backend, pool, name string) (*taskpickv1.Schedule, error) {
	r, err := s.c.tasks.PauseSchedule(ctx, &taskpickv1.PauseScheduleRequest{Backend: s.backend(backend), Pool: pool, Name: name})
	if err != nil {
		return nil, err
	}
	return r.GetSchedule(), nil
}

// Resume lets a paused schedule fire again from its next tick after now.
func (s Schedules) Resume(ctx context.Context, backend, pool, name string) (*taskpickv1.Schedule, error) {
	r, err := s.c.tasks.ResumeSchedule(ctx, &taskpickv1.ResumeScheduleRequest{Backend: s.backend(backend), Pool: pool, Name: name})
	if err != nil {
		return nil, err
	}
	return r.GetSchedule(), nil
}

// Delete removes a schedule; the tasks it put stay.
func (s Schedules) Delete(ctx context.Context, backend, pool, name string) error {
	_, err := s.c.tasks.DeleteSchedule(ctx, &taskpickv1.DeleteScheduleRequest{Backend: s.backend(backend), Pool: pool, Name: name})
	return err
}
