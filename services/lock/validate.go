package lock

import (
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/server"
)

// Limits on requests, checked at the edge before any backend is touched.
const (
	// MaxKeyBytes is the longest key, in bytes: the limit of every client-chosen name.
	MaxKeyBytes = server.MaxKeyBytes
	// MaxOwnerBytes is the longest owner secret, in bytes.
	MaxOwnerBytes = 128
	// MinOwnerBytes is the shortest owner secret a caller may choose, in bytes: an owner is
	// the only credential that releases or renews a lock, and a short one is guessed.
	// NewOwner's (26 characters) passes.
	MinOwnerBytes = 16
	// MinTTL and MaxTTL bound a lease.
	MinTTL = 100 * time.Millisecond
	// MaxTTL is the longest lease.
	MaxTTL = 24 * time.Hour
	// DefaultTTL is the lease length when a request leaves ttl unset.
	DefaultTTL = 30 * time.Second
	// MaxWait is the longest server-side wait one Acquire may ask for.
	MaxWait = time.Hour
)

func validateKey(key string) error { return server.CheckKey("key", key) }

func validateOwner(owner string, required bool) error {
	switch {
	case owner == "" && required:
		return server.InvalidField("owner", "must not be empty")
	case owner != "" && len(owner) < MinOwnerBytes:
		return server.InvalidField("owner", "is %d bytes, the minimum is %d: an owner is a secret, use a random one (or leave it empty on Acquire to get one)", len(owner), MinOwnerBytes)
	case len(owner) > MaxOwnerBytes:
		return server.InvalidField("owner", "is %d bytes, the limit is %d", len(owner), MaxOwnerBytes)
	case !utf8.ValidString(owner):
		return server.InvalidField("owner", "must be valid UTF-8")
	}
	return nil
}

// validateTTL checks a lease's ttl and cuts it to whole milliseconds, the unit every backend
// stores (Redis PX, the SQL rows' ms, ZooKeeper's node data): a lease reported to end at
// start + ttl must not end a fraction of a millisecond sooner where the backend dropped it.
func validateTTL(d *durationpb.Duration) (time.Duration, error) {
	ttl, err := server.DurationIn("ttl", d, DefaultTTL, MinTTL, MaxTTL)
	return ttl.Truncate(time.Millisecond), err
}

func validateWait(d *durationpb.Duration) (time.Duration, error) {
	return server.DurationIn("wait", d, 0, 0, MaxWait)
}
