package server

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// MaxKeyBytes is the longest key, in bytes, of every named thing a client picks: lock keys,
// task pools and task ids.
const MaxKeyBytes = 512

// MaxQuoteBytes is how much of a client's bad value an error message quotes: enough to
// recognize it, never so much that a 1 MB value comes back in the error.
const MaxQuoteBytes = 64

// InvalidField returns an invalid_argument error whose message starts with the field's
// name, as every service reports bad input. Quote any client value in it with Quote.
func InvalidField(field, format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// Quote is a client's value as an error message shows it: Go-quoted (invalid UTF-8 and
// control characters escaped), and when longer than MaxQuoteBytes only its first
// MaxQuoteBytes of quoted text, cut between characters, then "…" and the value's length:
// "abcabc…" (1048576 bytes).
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		_, size := utf8.DecodeRuneInString(s[i:]) // an invalid byte is 1 and quotes as \xff
		q := strconv.Quote(s[i : i+size])
		q = q[1 : len(q)-1]
		if b.Len()-1+len(q) > MaxQuoteBytes {
			return fmt.Sprintf("%s…\" (%d bytes)", b.String(), len(s))
		}
		b.WriteString(q)
		i += size
	}
	b.WriteByte('"')
	return b.String()
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
// lies in [lo, hi]. Out of range, the error says what the request said, in the protobuf
// JSON form ("315576000000s", not the 292 years a time.Duration saturates at), with a
// reading of it, and the range: `ttl: 315576000000s (about 10000 years) is outside the
// allowed range, 100ms to 24h`.
func DurationIn(field string, d *durationpb.Duration, def, lo, hi time.Duration) (time.Duration, error) {
	v, err := Duration(field, d, def)
	if err != nil {
		return 0, err
	}
	if v < lo || v > hi {
		return 0, InvalidField(field, "%s is outside the allowed range, %s to %s", requested(d, v), HumanDuration(lo), HumanDuration(hi))
	}
	return v, nil
}

// requested is a Duration as the request gave it (d, or the default v when unset): its
// protobuf JSON form, and in parentheses a reading of it when that form is not plain.
func requested(d *durationpb.Duration, v time.Duration) string {
	if d == nil {
		return HumanDuration(v) + " (the default)"
	}
	secs, nanos := d.GetSeconds(), d.GetNanos()
	sign := ""
	if secs < 0 || nanos < 0 {
		sign, secs, nanos = "-", -secs, -nanos // CheckValid: both have the same sign
	}
	form := sign + strconv.FormatInt(secs, 10)
	if nanos != 0 {
		form += strings.TrimRight(fmt.Sprintf(".%09d", nanos), "0")
	}
	form += "s"
	const year = 31_557_600 // 365.25 days
	switch {
	case secs >= 100*year:
		return fmt.Sprintf("%s (about %d years)", form, secs/year)
	case secs >= 60:
		return fmt.Sprintf("%s (%s%s)", form, sign, HumanDuration(time.Duration(secs)*time.Second+time.Duration(nanos)))
	}
	return form
}

// HumanDuration writes d exactly in the units a person reads, skipping the zero ones:
// 100ms, 1.5s, 30s, 10m, 1h30m, 24h, 24h1s, 3d12h (days from 48 hours on).
func HumanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + HumanDuration(-d)
	case d == 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + "ms"
	}
	var b strings.Builder
	for _, u := range []struct {
		size time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}} {
		if u.name == "d" && d < 48*time.Hour {
			continue
		}
		if n := d / u.size; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10) + u.name)
			d -= n * u.size
		}
	}
	if d > 0 {
		b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s")
	}
	return b.String()
}
