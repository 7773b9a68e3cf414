package lock

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Limits on requests, checked at the edge before any backend is touched.
const (
	// MaxKeyBytes is the longest key, in bytes.
	MaxKeyBytes = 512
	// MaxOwnerBytes is the longest owner secret, in bytes.
	MaxOwnerBytes = 128
	// MinTTL and MaxTTL bound a lease.
	MinTTL = 100 * time.Millisecond
	// MaxTTL is the longest lease.
	MaxTTL = 24 * time.Hour
	// DefaultTTL is the lease length when a request leaves ttl unset.
	DefaultTTL = 30 * time.Second
	// MaxWait is the longest server-side wait one Acquire may ask for.
	MaxWait = time.Hour
)

// invalid returns an invalid_argument error that names the field.
func invalid(field, format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func validateKey(key string) error { return validateKeyField("key", key) }

// validateKeyField checks a key, or a key prefix, in the request field named field.
func validateKeyField(field, key string) error {
	switch {
	case key == "":
		return invalid(field, "must not be empty")
	case len(key) > MaxKeyBytes:
		return invalid(field, "is %d bytes, the limit is %d", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return invalid(field, "must be valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return invalid(field, "must not contain NUL")
	}
	return nil
}

func validateOwner(owner string, required bool) error {
	switch {
	case owner == "" && required:
		return invalid("owner", "must not be empty")
	case len(owner) > MaxOwnerBytes:
		return invalid("owner", "is %d bytes, the limit is %d", len(owner), MaxOwnerBytes)
	case !utf8.ValidString(owner):
		return invalid("owner", "must be valid UTF-8")
	}
	return nil
}

// durationField converts an optional Duration; unset gives def.
func durationField(field string, d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid(field, "%v", err)
	}
	return d.AsDuration(), nil
}

func validateTTL(d *durationpb.Duration) (time.Duration, error) {
	ttl, err := durationField("ttl", d, DefaultTTL)
	if err != nil {
		return 0, err
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return 0, invalid("ttl", "%v is outside [%v, %v]", ttl, MinTTL, MaxTTL)
	}
	return ttl, nil
}

func validateWait(d *durationpb.Duration) (time.Duration, error) {
	wait, err := durationField("wait", d, 0)
	if err != nil {
		return 0, err
	}
	if wait < 0 || wait > MaxWait {
		return 0, invalid("wait", "%v is outside [0s, %v]", wait, MaxWait)
	}
	return wait, nil
}
