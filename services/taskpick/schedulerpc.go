package taskpick

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/server"
)

// PutSchedule implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) PutSchedule(ctx context.Context, req *taskpickv1.PutScheduleRequest) (*taskpickv1.PutScheduleResponse, error) {
	if err := checkScheduleName(req.GetPool(), req.GetName()); err != nil {
		return nil, err
	}
	now := s.now()
	c, err := parseSpec(req.GetSpec(), req.GetTimezone(), now)
	if err != nil {
		return nil, err
	}
	tpl := req.GetTemplate()
	if len(tpl.GetPayload()) > MaxPayloadBytes {
		return nil, server.InvalidField("template.payload", "is %d bytes, the limit is %d", len(tpl.GetPayload()), MaxPayloadBytes)
	}
	maxA := tpl.GetMaxAttempts() // 0: the pool's default when each task is put, as for Put
	if maxA > MaxAttempts {
		return nil, server.InvalidField("template.max_attempts", "%d is over the limit %d", maxA, MaxAttempts)
	}
	missed, err := parseMissed(req.GetMissed())
	if err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	tz := req.GetTimezone()
	if tz == "" {
		tz = "UTC"
	}
	sc, created, err := b.PutSchedule(ctx, Schedule{
		Pool: req.GetPool(), Name: req.GetName(), Spec: req.GetSpec(), Timezone: tz,
		Payload: tpl.GetPayload(), Priority: tpl.GetPriority(), MaxAttempts: maxA, Missed: missed,
		NextFire: c.next(now),
	})
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	return &taskpickv1.PutScheduleResponse{Schedule: scheduleProto(sc), Created: created}, nil
}

// GetSchedule implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) GetSchedule(ctx context.Context, req *taskpickv1.GetScheduleRequest) (*taskpickv1.GetScheduleResponse, error) {
	if err := checkScheduleName(req.GetPool(), req.GetName()); err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	sc, err := b.GetSchedule(ctx, req.GetPool(), req.GetName())
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	return &taskpickv1.GetScheduleResponse{Schedule: scheduleProto(sc)}, nil
}

// ListSchedules implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) ListSchedules(ctx context.Context, req *taskpickv1.ListSchedulesRequest) (*taskpickv1.ListSchedulesResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	limit, err := parseCount("limit", req.GetLimit(), DefaultListSchedules, MaxListSchedules)
	if err != nil {
		return nil, err
	}
	if len(req.GetAfter()) > MaxScheduleNameBytes {
		return nil, server.InvalidField("after", "is %d bytes, the limit is %d", len(req.GetAfter()), MaxScheduleNameBytes)
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	// The answer stays within the answer limit: a schedule's template is at most
	// MaxPayloadBytes, and the page is cut where the next would pass the limit. The backend
	// is read listScheduleChunk schedules at a time, so a page of 1,000 large templates is
	// not read whole only to be cut (one more than a chunk tells whether another follows).
	resp := &taskpickv1.ListSchedulesResponse{}
	size, after := 0, req.GetAfter()
	for {
		want := min(limit-len(resp.Schedules), listScheduleChunk)
		list, err := b.ListSchedules(ctx, req.GetPool(), after, want+1)
		if err != nil {
			return nil, server.Error(ctx, err)
		}
		for i, sc := range list {
			n := len(resp.Schedules)
			cost := AnswerBytes(len(sc.Payload), len(sc.Name)+len(sc.Spec)+len(sc.Timezone)+len(sc.Pool))
			if n == limit || (n > 0 && size+cost > s.maxAnswer-answerSlack) {
				resp.NextAfter = resp.Schedules[n-1].GetName()
				return resp, nil
			}
			if i == want {
				break // read again as the next chunk's first
			}
			size += cost
			resp.Schedules = append(resp.Schedules, scheduleProto(sc))
		}
		if len(list) <= want {
			return resp, nil
		}
		after = resp.Schedules[len(resp.Schedules)-1].GetName()
	}
}

// listScheduleChunk is how many schedules ListSchedules reads from the backend at a time:
// at most about 4 MiB of templates.
const listScheduleChunk = 16

// PauseSchedule implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) PauseSchedule(ctx context.Context, req *taskpickv1.PauseScheduleRequest) (*taskpickv1.PauseScheduleResponse, error) {
	if err := checkScheduleName(req.GetPool(), req.GetName()); err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	sc, err := b.PauseSchedule(ctx, req.GetPool(), req.GetName())
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	return &taskpickv1.PauseScheduleResponse{Schedule: scheduleProto(sc)}, nil
}

// ResumeSchedule implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) ResumeSchedule(ctx context.Context, req *taskpickv1.ResumeScheduleRequest) (*taskpickv1.ResumeScheduleResponse, error) {
	if err := checkScheduleName(req.GetPool(), req.GetName()); err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	now := s.now()
	sc, err := b.ResumeSchedule(ctx, req.GetPool(), req.GetName(), func(sc Schedule) time.Time {
		c, err := storedSpec(sc)
		if err != nil {
			return time.Time{}
		}
		return c.next(now)
	})
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	return &taskpickv1.ResumeScheduleResponse{Schedule: scheduleProto(sc)}, nil
}

// DeleteSchedule implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) DeleteSchedule(ctx context.Context, req *taskpickv1.DeleteScheduleRequest) (*taskpickv1.DeleteScheduleResponse, error) {
	if err := checkScheduleName(req.GetPool(), req.GetName()); err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	if err := b.DeleteSchedule(ctx, req.GetPool(), req.GetName()); err != nil {
		return nil, server.Error(ctx, err)
	}
	return &taskpickv1.DeleteScheduleResponse{}, nil
}

// checkScheduleName checks the pool and the schedule's name.
func checkScheduleName(pool, name string) error {
	if err := server.CheckKey("pool", pool); err != nil {
		return err
	}
	if err := server.CheckKey("name", name); err != nil {
		return err
	}
	if len(name) > MaxScheduleNameBytes {
		return server.InvalidField("name", "is %d bytes, the limit is %d", len(name), MaxScheduleNameBytes)
	}
	return nil
}

// parseMissed maps the API's missed-tick policy; unset is skip.
func parseMissed(m taskpickv1.ScheduleMissed) (Missed, error) {
	switch m {
	case taskpickv1.ScheduleMissed_SCHEDULE_MISSED_UNSPECIFIED, taskpickv1.ScheduleMissed_SCHEDULE_MISSED_SKIP:
		return MissedSkip, nil
	case taskpickv1.ScheduleMissed_SCHEDULE_MISSED_RUN_ONCE:
		return MissedRunOnce, nil
	}
	return 0, server.InvalidField("missed", "%d is not a known policy (SCHEDULE_MISSED_SKIP or SCHEDULE_MISSED_RUN_ONCE)", int32(m))
}

func scheduleProto(sc Schedule) *taskpickv1.Schedule {
	p := &taskpickv1.Schedule{
		Pool: sc.Pool, Name: sc.Name, Spec: sc.Spec, Timezone: sc.Timezone, Paused: sc.Paused,
		Template: &taskpickv1.ScheduleTemplate{Payload: sc.Payload, Priority: sc.Priority, MaxAttempts: sc.MaxAttempts},
		Missed:   taskpickv1.ScheduleMissed(sc.Missed),
	}
	if !sc.NextFire.IsZero() {
		p.NextFire = timestamppb.New(sc.NextFire)
	}
	if !sc.LastFire.IsZero() {
		p.LastFire = timestamppb.New(sc.LastFire)
	}
	return p
}
