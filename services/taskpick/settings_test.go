package taskpick_test

import (
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/taskpick"
)

// TestRetryPolicyDelay: the delay grows by the multiplier, stops at the cap for any attempt
// (no overflow at attempt 2^32-1), and jitter only ever shortens it, by at most its share.
func TestRetryPolicyDelay(t *testing.T) {
	t.Parallel()
	p := &taskpick.RetryPolicy{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.5}
	for _, c := range []struct {
		attempt uint32
		draw    float64
		want    time.Duration
	}{
		{1, 0, time.Second},
		{2, 0, 2 * time.Second},
		{6, 0, 32 * time.Second},
		{7, 0, time.Minute},
		{1 << 31, 0, time.Minute},
		{^uint32(0), 0, time.Minute},
		{1, 0.999999, 500*time.Millisecond + time.Millisecond}, // rounded up to whole ms
		{7, 0.5, 45 * time.Second},
	} {
		if got := p.Delay(c.attempt, c.draw); got != c.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", c.attempt, c.draw, got, c.want)
		}
	}
	flat := &taskpick.RetryPolicy{Initial: 3 * time.Second, Max: time.Hour, Multiplier: 1}
	if got := flat.Delay(^uint32(0), 0); got != 3*time.Second {
		t.Errorf("multiplier 1: Delay(2^32-1) = %v, want the initial 3s (and at once)", got)
	}
	var none *taskpick.RetryPolicy
	if got := none.Delay(5, 0.5); got != 0 {
		t.Errorf("no policy: Delay = %v, want 0", got)
	}
}
