package taskpick

import (
	"math"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/server"
)

// Pool settings: what a pool keeps besides its tasks, one record per pool, created on first
// use. A pool without a record has the zero PoolSettings, which is the service's behaviour
// before settings existed: no retry delay, the service's attempt budget, not paused.

// Errors of CancelTask. Each is failed_precondition: the task exists but is past cancelling.
var (
	// ErrCancelLeased means the task is held by a worker, who would not learn of a cancel.
	ErrCancelLeased = server.NewError(connect.CodeFailedPrecondition,
		"taskpick: the task is leased and cannot be cancelled: its worker holds it; cancel only available or delayed tasks")
	// ErrCancelDead means the task used every attempt; Requeue revives it, nothing cancels it.
	ErrCancelDead = server.NewError(connect.CodeFailedPrecondition,
		"taskpick: the task is dead and cannot be cancelled: cancel only available or delayed tasks")
	// ErrCancelDone means the task was acked.
	ErrCancelDone = server.NewError(connect.CodeFailedPrecondition,
		"taskpick: the task is done and cannot be cancelled: cancel only available or delayed tasks")
)

// PoolPolicy, as the retryAfter of Backend.Nack, asks for the pool's retry policy: the
// backend reads the policy and the task's attempt in the step that gives the task back.
const PoolPolicy time.Duration = -1

// Limits of pool settings.
const (
	// MaxMultiplier is the largest growth factor of a retry policy.
	MaxMultiplier = 100
	// DefaultMultiplier is a retry policy's growth when it names none.
	DefaultMultiplier = 2
	// MaxLeasedLimit is the largest max_leased a pool may have (2^31 - 1): every engine
	// stores it in a signed 32-bit column or a Lua number.
	MaxLeasedLimit = math.MaxInt32
	// MaxRate is the largest rate limit, in tasks a second.
	MaxRate = 1_000_000
)

// RetryPolicy is a pool's exponential backoff with jitter.
type RetryPolicy struct {
	// Initial is the delay after attempt 1; more than 0.
	Initial time.Duration
	// Max caps the delay; at least Initial.
	Max time.Duration
	// Multiplier grows the delay per attempt; 1 to MaxMultiplier.
	Multiplier float64
	// Jitter is how much of a delay is random, 0 to 1.
	Jitter float64
}

// PoolSettings is a pool's stored record.
type PoolSettings struct {
	// Retry is the delay of a Nack without retry_after; nil means none.
	Retry *RetryPolicy
	// MaxAttempts is the budget of tasks put without one; 0 means DefaultMaxAttempts.
	MaxAttempts uint32
	// Paused stops picks.
	Paused bool
	// MaxLeased is the most tasks of the pool leased at once (live leases: expired ones do
	// not count); 0 means no limit. A Pick leases at most MaxLeased minus the live leases, in
	// the same atomic step that counts them.
	MaxLeased uint32
	// Rate is the most tasks of the pool leased per second (a token bucket on the backend's
	// clock, see Refill); 0 means no rate limit.
	Rate float64
	// Burst is the bucket's size; 0 means 1. Only with a Rate.
	Burst uint32
}

// Limited reports whether the settings limit picks (MaxLeased or Rate).
func (s PoolSettings) Limited() bool { return s.MaxLeased > 0 || s.Rate > 0 }

// Refill is a pool's token bucket at nowMs: it held tokens at lastMs (lastMs 0: never used,
// so full) and gains rate a second up to burst (0 means 1). With fewer than one token, next
// is how many milliseconds until there is one (at least 1). The Redis engine computes the
// same in its pick script.
func Refill(rate float64, burst uint32, tokens float64, lastMs, nowMs int64) (have float64, next int64) {
	size := float64(max(burst, 1))
	have = size
	if lastMs > 0 {
		have = math.Min(size, tokens+float64(max(nowMs-lastMs, 0))*rate/1000)
	}
	if have < 1 {
		next = max(int64(math.Ceil((1-have)*1000/rate)), 1)
	}
	return have, next
}

// Delay is how long a task waits after the failure of attempt (from 1), with draw, uniform
// in [0, 1), choosing within the jitter: min(Max, Initial × Multiplier^(attempt-1)) × (1 -
// Jitter × draw), in whole milliseconds rounded up. A nil policy waits 0.
func (p *RetryPolicy) Delay(attempt uint32, draw float64) time.Duration {
	if p == nil {
		return 0
	}
	return time.Duration(DelayMillis(p.Initial.Milliseconds(), p.Max.Milliseconds(), p.Multiplier, p.Jitter, attempt, draw)) * time.Millisecond
}

// DelayMillis is RetryPolicy.Delay in milliseconds, the form the backends store and the
// Redis engine computes in Lua the same way: the exponent stops growing once the cap is
// reached, or at MaxAttempts (no task is picked more often), so no attempt number overflows
// or loops long.
func DelayMillis(initial, maxMs int64, mult, jitter float64, attempt uint32, draw float64) int64 {
	if initial <= 0 {
		return 0
	}
	d := float64(initial)
	for i := uint32(1); i < min(attempt, MaxAttempts) && d < float64(maxMs); i++ {
		d *= mult
	}
	d = math.Min(d, float64(maxMs))
	d *= 1 - jitter*draw
	return int64(math.Ceil(d))
}

// MaxAttemptsFor is what a backend stores as the max_attempts of a task put with maxA (0:
// unset) into a pool whose settings say def (0: none): maxA, else def, else
// DefaultMaxAttempts.
func MaxAttemptsFor(maxA, def uint32) uint32 {
	switch {
	case maxA != 0:
		return maxA
	case def != 0:
		return def
	}
	return DefaultMaxAttempts
}
