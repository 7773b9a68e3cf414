package server

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// MaxKeyBytes is the longest key, in bytes, of every named thing a client picks: lock keys,
// task pools and task ids.
const MaxKeyBytes = 512

// InvalidField returns an invalid_argument error whose message starts with the field's
// name, as every service reports bad input.
func InvalidField(field, format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// CheckKey checks a client-chosen name in the request field named field: 1 to MaxKeyBytes
// bytes of valid UTF-8 without NUL. The same rule holds for lock keys, key prefixes, task
// pools and task ids, so one name is valid everywhere or nowhere.
func CheckKey(field, key string) error {
	switch {
	case key == "":
		return InvalidField(field, "must not be empty")
	case len(key) > MaxKeyBytes:
		return InvalidField(field, "is %d bytes, the limit is %d", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return InvalidField(field, "must be valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return InvalidField(field, "must not contain NUL")
	}
	return nil
}

// Duration converts the optional Duration in field; unset gives def.
func Duration(field string, d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, InvalidField(field, "%v", err)
	}
	return d.AsDuration(), nil
}

// DurationIn converts the optional Duration in field (unset gives def) and checks that it
// lies in [lo, hi].
func DurationIn(field string, d *durationpb.Duration, def, lo, hi time.Duration) (time.Duration, error) {
	v, err := Duration(field, d, def)
	if err != nil {
		return 0, err
	}
	if v < lo || v > hi {
		return 0, InvalidField(field, "%v is outside [%v, %v]", v, lo, hi)
	}
	return v, nil
}
