package lock

import (
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// appendEventJSON appends ev in its protobuf JSON form, as protojson.Marshal writes it (field
// names in lowerCamelCase, the kind by name, the fencing token as a decimal string, times in
// RFC 3339 UTC with 0, 3, 6 or 9 fraction digits, unset fields left out), without
// protojson's reflection: every lock change publishes one, so it is on the hot path.
// eventjson_test.go checks that protojson reads back exactly ev.
func appendEventJSON(b []byte, ev *lockv1.LockEvent) []byte {
	b = append(b, '{')
	first := true
	field := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	if v := ev.GetKey(); v != "" {
		field("key")
		b = appendJSONString(b, v)
	}
	if v := ev.GetBackend(); v != "" {
		field("backend")
		b = appendJSONString(b, v)
	}
	if v := ev.GetKind(); v != lockv1.LockEventKind_LOCK_EVENT_KIND_UNSPECIFIED {
		field("kind")
		if name, ok := lockv1.LockEventKind_name[int32(v)]; ok {
			b = appendJSONString(b, name)
		} else {
			b = strconv.AppendInt(b, int64(v), 10)
		}
	}
	if v := ev.GetFencingToken(); v != 0 {
		field("fencingToken")
		b = append(b, '"')
		b = strconv.AppendUint(b, v, 10)
		b = append(b, '"')
	}
	if v := ev.GetHolderId(); v != "" {
		field("holderId")
		b = appendJSONString(b, v)
	}
	if v := ev.GetExpiresAt(); v != nil {
		field("expiresAt")
		b = appendJSONTime(b, v)
	}
	if v := ev.GetTime(); v != nil {
		field("time")
		b = appendJSONTime(b, v)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD, as protojson
// would refuse it (keys are checked to be valid UTF-8 before they get here).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				switch c {
				case '\n':
					b = append(b, '\\', 'n')
				case '\r':
					b = append(b, '\\', 'r')
				case '\t':
					b = append(b, '\\', 't')
				case '\b':
					b = append(b, '\\', 'b')
				case '\f':
					b = append(b, '\\', 'f')
				default:
					b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
				}
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// appendJSONTime appends t as protojson writes a google.protobuf.Timestamp.
func appendJSONTime(b []byte, t *timestamppb.Timestamp) []byte {
	nanos := int(t.GetNanos())
	b = append(b, '"')
	b = time.Unix(t.GetSeconds(), 0).UTC().AppendFormat(b, "2006-01-02T15:04:05")
	switch {
	case nanos == 0:
	case nanos%1_000_000 == 0:
		b = appendFraction(b, nanos/1_000_000, 3)
	case nanos%1_000 == 0:
		b = appendFraction(b, nanos/1_000, 6)
	default:
		b = appendFraction(b, nanos, 9)
	}
	return append(b, 'Z', '"')
}

// appendFraction appends '.' and v zero-padded to digits digits.
func appendFraction(b []byte, v, digits int) []byte {
	b = append(b, '.')
	var buf [9]byte
	for i := digits - 1; i >= 0; i-- {
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, buf[:digits]...)
}
