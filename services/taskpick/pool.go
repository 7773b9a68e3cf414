package taskpick

import (
	"context"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/server"
)

// SetPoolSettings implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) SetPoolSettings(ctx context.Context, req *taskpickv1.SetPoolSettingsRequest) (*taskpickv1.SetPoolSettingsResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	set, err := parseSettings(req.GetSettings())
	if err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	stored, err := b.SetSettings(ctx, req.GetPool(), set)
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	s.limits.remember(name, req.GetPool(), stored.MaxLeased > 0)
	s.announceAvailable(ctx, name, b, req.GetPool()) // a higher limit, or none, frees places
	return &taskpickv1.SetPoolSettingsResponse{Settings: settingsProto(stored)}, nil
}

// GetPoolSettings implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) GetPoolSettings(ctx context.Context, req *taskpickv1.GetPoolSettingsRequest) (*taskpickv1.GetPoolSettingsResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	set, stored, err := b.Settings(ctx, req.GetPool())
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	return &taskpickv1.GetPoolSettingsResponse{Settings: settingsProto(set), Stored: stored}, nil
}

// PausePool implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) PausePool(ctx context.Context, req *taskpickv1.PausePoolRequest) (*taskpickv1.PausePoolResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	if err := b.SetPaused(ctx, req.GetPool(), true); err != nil {
		return nil, server.Error(ctx, err)
	}
	return &taskpickv1.PausePoolResponse{}, nil
}

// ResumePool implements taskpickv1connect.TaskPickServiceHandler: after the flag is cleared
// it announces the pool's available tasks, which wakes as many waiting Picks on every
// instance (the paused Picks wait for that, not for their recheck).
func (s *Service) ResumePool(ctx context.Context, req *taskpickv1.ResumePoolRequest) (*taskpickv1.ResumePoolResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	if err := b.SetPaused(ctx, req.GetPool(), false); err != nil {
		return nil, server.Error(ctx, err)
	}
	s.announceAvailable(ctx, name, b, req.GetPool())
	return &taskpickv1.ResumePoolResponse{}, nil
}

// CancelTask implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) CancelTask(ctx context.Context, req *taskpickv1.CancelTaskRequest) (*taskpickv1.CancelTaskResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if err := server.CheckKey("id", req.GetId()); err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	if err := b.Cancel(ctx, req.GetPool(), req.GetId()); err != nil {
		return nil, server.Error(ctx, err)
	}
	s.count(name, "cancelled", 1)
	return &taskpickv1.CancelTaskResponse{}, nil
}

// parseSettings validates a SetPoolSettings request's settings whole; nil stores the
// defaults.
func parseSettings(in *taskpickv1.PoolSettings) (PoolSettings, error) {
	var out PoolSettings
	if in.MaxAttempts != nil {
		n := in.GetMaxAttempts()
		if n < 1 || n > MaxAttempts {
			return out, server.InvalidField("settings.max_attempts", "%d is outside [1, %d]; leave it unset for the service's default (%d)", n, MaxAttempts, DefaultMaxAttempts)
		}
		out.MaxAttempts = n
	}
	if r := in.GetRetry(); r != nil {
		p, err := parseRetry(r)
		if err != nil {
			return out, err
		}
		out.Retry = &p
	}
	if n := in.GetMaxLeased(); n > MaxLeasedLimit {
		return out, server.InvalidField("settings.max_leased", "%d is above %d; 0 means no limit", n, MaxLeasedLimit)
	}
	out.MaxLeased = in.GetMaxLeased()
	if r := in.GetRate(); math.IsNaN(r) || r < 0 || r > MaxRate {
		return out, server.InvalidField("settings.rate", "%v is outside [0, %d] tasks a second; 0 means no rate limit", r, MaxRate)
	}
	out.Rate = in.GetRate()
	switch b := in.GetBurst(); {
	case b > MaxLeasedLimit:
		return out, server.InvalidField("settings.burst", "%d is above %d", b, MaxLeasedLimit)
	case b > 0 && out.Rate == 0:
		return out, server.InvalidField("settings.burst", "is set without settings.rate: a burst is the size of a rate limit's bucket")
	}
	out.Burst = in.GetBurst()
	return out, nil
}

// parseRetry validates a retry policy: every duration positive and within MaxDelay, the cap
// at least the initial delay, the multiplier and jitter finite and in range.
func parseRetry(r *taskpickv1.RetryPolicy) (RetryPolicy, error) {
	var p RetryPolicy
	if r.GetInitial() == nil {
		return p, server.InvalidField("settings.retry.initial", "is required: the delay after the first attempt")
	}
	initial, err := server.DurationIn("settings.retry.initial", r.GetInitial(), 0, time.Millisecond, MaxDelay)
	if err != nil {
		return p, err
	}
	maxD, err := server.DurationIn("settings.retry.max", r.GetMax(), MaxDelay, time.Millisecond, MaxDelay)
	if err != nil {
		return p, err
	}
	if maxD < initial {
		return p, server.InvalidField("settings.retry.max", "%s is below settings.retry.initial %s: the cap must be at least the first delay",
			server.HumanDuration(maxD), server.HumanDuration(initial))
	}
	mult := r.GetMultiplier()
	switch {
	case mult == 0:
		mult = DefaultMultiplier
	case math.IsNaN(mult) || mult < 1 || mult > MaxMultiplier:
		return p, server.InvalidField("settings.retry.multiplier", "%v is outside [1, %d]; 0 means %d", mult, MaxMultiplier, DefaultMultiplier)
	}
	jitter := r.GetJitter()
	if math.IsNaN(jitter) || jitter < 0 || jitter > 1 {
		return p, server.InvalidField("settings.retry.jitter", "%v is outside [0, 1]", jitter)
	}
	return RetryPolicy{Initial: initial.Truncate(time.Millisecond), Max: maxD.Truncate(time.Millisecond), Multiplier: mult, Jitter: jitter}, nil
}

// settingsProto maps stored settings to the API.
func settingsProto(s PoolSettings) *taskpickv1.PoolSettings {
	out := &taskpickv1.PoolSettings{Paused: s.Paused, MaxLeased: s.MaxLeased, Rate: s.Rate, Burst: s.Burst}
	if s.MaxAttempts != 0 {
		n := s.MaxAttempts
		out.MaxAttempts = &n
	}
	if r := s.Retry; r != nil {
		out.Retry = &taskpickv1.RetryPolicy{Initial: durationpb.New(r.Initial), Max: durationpb.New(r.Max), Multiplier: r.Multiplier, Jitter: r.Jitter}
	}
	return out
}
