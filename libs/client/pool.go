package client

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// Pool is one task pool's administration: its settings, pausing, and cancelling its tasks.
// Get one from Client.Pool; it holds nothing but the names.
type Pool struct {
	c       *Client
	backend string
	name    string
}

// Pool returns the pool name on backend (empty: the service's default backend).
func (c *Client) Pool(backend, name string) *Pool { return &Pool{c: c, backend: backend, name: name} }

// RetryPolicy is a pool's exponential backoff: after the failure of attempt a (from 1), a
// Nack without a retry delay (Work without WithBackoff) makes the task wait
// min(Max, Initial × Multiplier^(a-1)), less a random part of up to Jitter of it.
type RetryPolicy struct {
	// Initial is the delay after attempt 1: more than 0, at most 30 days.
	Initial time.Duration
	// Max caps the delay: at least Initial; 0 means 30 days.
	Max time.Duration
	// Multiplier grows the delay per attempt: 1 to 100; 0 means 2.
	Multiplier float64
	// Jitter is how much of each delay is random: 0 to 1.
	Jitter float64
}

// PoolSettings is what a pool keeps besides its tasks.
type PoolSettings struct {
	// Retry is the delay of a Nack without retry_after; nil means none (at once).
	Retry *RetryPolicy
	// MaxAttempts is the attempt budget of tasks put without one; 0 means the service's.
	MaxAttempts uint32
	// Paused is true while the pool is paused (Pause); SetSettings ignores it.
	Paused bool
	// MaxLeased is the most tasks of the pool leased at once across every worker: picks
	// over it wait for an Ack, Nack or expiry to free a place. 0 means no limit; at most
	// 2^31 - 1.
	MaxLeased uint32
	// Rate is the most tasks of the pool leased per second across every worker, a token
	// bucket kept by the backend; 0 means no rate limit; at most 1,000,000.
	Rate float64
	// Burst is the bucket's size: the most tasks leased at once after a quiet while. Only
	// with a Rate; 0 means 1.
	Burst uint32
}

// Settings reads the pool's settings: the defaults when none are stored.
func (p *Pool) Settings(ctx context.Context) (PoolSettings, error) {
	r, err := p.c.tasks.GetPoolSettings(ctx, &taskpickv1.GetPoolSettingsRequest{Backend: p.backend, Pool: p.name})
	if err != nil {
		return PoolSettings{}, err
	}
	return settingsFrom(r.GetSettings()), nil
}

// SetSettings replaces the pool's retry policy, default max attempts and limits as a whole
// (the paused flag stays as it is) and returns the settings now stored.
func (p *Pool) SetSettings(ctx context.Context, s PoolSettings) (PoolSettings, error) {
	req := &taskpickv1.SetPoolSettingsRequest{Backend: p.backend, Pool: p.name, Settings: &taskpickv1.PoolSettings{MaxLeased: s.MaxLeased, Rate: s.Rate, Burst: s.Burst}}
	if s.MaxAttempts != 0 {
		req.Settings.MaxAttempts = &s.MaxAttempts
	}
	if r := s.Retry; r != nil {
		req.Settings.Retry = &taskpickv1.RetryPolicy{Initial: durationpb.New(r.Initial), Multiplier: r.Multiplier, Jitter: r.Jitter}
		if r.Max != 0 {
			req.Settings.Retry.Max = durationpb.New(r.Max)
		}
	}
	res, err := p.c.tasks.SetPoolSettings(ctx, req)
	if err != nil {
		return PoolSettings{}, err
	}
	return settingsFrom(res.GetSettings()), nil
}

// Pause stops picks of the pool: a Pick sent after Pause returned leases nothing (Work's
// long polls keep waiting) until Resume.
func (p *Pool) Pause(ctx context.Context) error {
	_, err := p.c.tasks.PausePool(ctx, &taskpickv1.PausePoolRequest{Backend: p.backend, Pool: p.name})
	return err
}

// Resume lets picks of the pool go on and wakes the Picks waiting on it.
func (p *Pool) Resume(ctx context.Context) error {
	_, err := p.c.tasks.ResumePool(ctx, &taskpickv1.ResumePoolRequest{Backend: p.backend, Pool: p.name})
	return err
}

// Cancel cancels an available or delayed task so that it never runs. A leased, dead or done
// task is failed_precondition; a missing one (or one cancelled and already purged) not_found.
func (p *Pool) Cancel(ctx context.Context, id string) error {
	_, err := p.c.tasks.CancelTask(ctx, &taskpickv1.CancelTaskRequest{Backend: p.backend, Pool: p.name, Id: id})
	return err
}

func settingsFrom(s *taskpickv1.PoolSettings) PoolSettings {
	out := PoolSettings{MaxAttempts: s.GetMaxAttempts(), Paused: s.GetPaused(), MaxLeased: s.GetMaxLeased(),
		Rate: s.GetRate(), Burst: s.GetBurst()}
	if r := s.GetRetry(); r != nil {
		out.Retry = &RetryPolicy{Initial: r.GetInitial().AsDuration(), Max: r.GetMax().AsDuration(), Multiplier: r.GetMultiplier(), Jitter: r.GetJitter()}
	}
	return out
}
