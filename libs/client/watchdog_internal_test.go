package client

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// TestSafetyMargin pins the documented margin: ttl/10, at least 50ms, at most 1s, never more
// than a quarter of the ttl, so that retries always keep most of the lease.
func TestSafetyMargin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ttl, want time.Duration
	}{
		{100 * time.Millisecond, 25 * time.Millisecond}, // the quarter wins over the floor
		{200 * time.Millisecond, 50 * time.Millisecond},
		{300 * time.Millisecond, 50 * time.Millisecond}, // the floor
		{600 * time.Millisecond, 60 * time.Millisecond},
		{time.Second, 100 * time.Millisecond},
		{10 * time.Second, time.Second},
		{30 * time.Second, time.Second}, // the ceiling
		{24 * time.Hour, time.Second},
	}
	for _, tt := range tests {
		if got := safetyMargin(tt.ttl); got != tt.want {
			t.Errorf("safetyMargin(%v) = %v, want %v", tt.ttl, got, tt.want)
		}
	}
}

// TestBackoffBounds checks that retries stay jittered within bounds that fit several tries in
// the shortest lease the service grants and that a long outage is not hammered.
func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{100 * time.Millisecond, time.Second, 30 * time.Second, 24 * time.Hour} {
		first, last := firstBackoff(ttl), maxBackoff(ttl)
		window := ttl - ttl/3 - safetyMargin(ttl) // from the first renewal to the deadline
		if first <= 0 || first > last || last > time.Second || 3*last > window {
			t.Errorf("ttl %v: backoff %v..%v, want 0 < first <= max <= min(1s, a third of the %v retry window)", ttl, first, last, window)
		}
		seen := map[time.Duration]bool{}
		for range 200 {
			j := jitter(last)
			if j < last/2 || j > last {
				t.Fatalf("jitter(%v) = %v, want within [%v, %v]", last, j, last/2, last)
			}
			seen[j] = true
		}
		if len(seen) < 10 {
			t.Errorf("jitter(%v) gave %d distinct values in 200 draws, want spread", last, len(seen))
		}
	}
}

// TestGone pins which answers end a lease at once: those that say it is someone else's or
// gone, and those no retry can fix. Everything else is retried until the deadline.
func TestGone(t *testing.T) {
	t.Parallel()
	final := map[connect.Code]bool{
		connect.CodeFailedPrecondition: true,
		connect.CodePermissionDenied:   true,
		connect.CodeInvalidArgument:    true,
		connect.CodeNotFound:           true,
		connect.CodeUnauthenticated:    true,
	}
	for code := connect.CodeCanceled; code <= connect.CodeUnauthenticated; code++ {
		err := fmt.Errorf("wrapped: %w", connect.NewError(code, errors.New("x")))
		if got := gone(err); got != final[code] {
			t.Errorf("gone(%v) = %v, want %v", code, got, final[code])
		}
	}
	if gone(errors.New("not a connect error")) {
		t.Error("gone(plain error) = true, want retried")
	}
	if gone(errNoAnswer) {
		t.Error("gone(errNoAnswer) = true, want retried")
	}
}
