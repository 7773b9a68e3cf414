package redistask

import (
	"strconv"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/services/taskpick"
)

// TestPolicyLoopBound: the Lua retry delay stops its exponent where taskpick.DelayMillis does.
func TestPolicyLoopBound(t *testing.T) {
	if !strings.Contains(prelude, "i < "+strconv.Itoa(taskpick.MaxAttempts)+" and d < rc") {
		t.Fatalf("policyDelay's loop bound is not taskpick.MaxAttempts (%d)", taskpick.MaxAttempts)
	}
}
