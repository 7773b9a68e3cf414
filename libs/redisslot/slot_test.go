package redisslot_test

import (
	"testing"

	"github.com/coordkit/coordkit/libs/redisslot"
)

func TestOf(t *testing.T) {
	for _, c := range []struct {
		name string
		slot int
	}{
		{"foo", 12182}, // CLUSTER KEYSLOT foo
		{"{user1000}.following", 3443},
		{"foo{}{bar}", 8363},    // an empty tag hashes the whole name
		{"foo{{bar}}zap", 4015}, // the tag is "{bar"
	} {
		if got := redisslot.Of(c.name); got != c.slot {
			t.Errorf("Of(%q) = %d, want %d", c.name, got, c.slot)
		}
	}
}

func TestTagLandsInItsSlot(t *testing.T) {
	for s := range redisslot.Count {
		if got := redisslot.Of("{" + redisslot.Tag(s) + "}x"); got != s {
			t.Fatalf("Tag(%d) lands in slot %d", s, got)
		}
	}
}
