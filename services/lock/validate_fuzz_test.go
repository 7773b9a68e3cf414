package lock

import (
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// FuzzParseAcquire checks that request validation never panics, rejects with
// invalid_argument naming a field, and only lets through what the backends can take.
func FuzzParseAcquire(f *testing.F) {
	f.Add("order:42", "", "", int64(10), int32(0), int64(0), int32(0), true, false)
	f.Add("", "owner", "redis", int64(0), int32(50_000_000), int64(-1), int32(0), true, true)
	f.Add(strings.Repeat("k", 513), "", "", int64(86_401), int32(0), int64(3_601), int32(0), true, true)
	f.Add("a\xffb", "o\x00", "sqlite", int64(1), int32(-1), int64(0), int32(1), true, true)
	f.Add("锁 with space/and.dots", strings.Repeat("o", 129), "", int64(0), int32(0), int64(0), int32(0), false, false)
	f.Fuzz(func(t *testing.T, key, owner, backend string, ttlS int64, ttlN int32, waitS int64, waitN int32, hasTTL, hasWait bool) {
		req := &lockv1.AcquireRequest{Key: key, Owner: owner, Backend: backend}
		if hasTTL {
			req.Ttl = &durationpb.Duration{Seconds: ttlS, Nanos: ttlN}
		}
		if hasWait {
			req.Wait = &durationpb.Duration{Seconds: waitS, Nanos: waitN}
		}
		p, err := parseAcquire(req)
		if err != nil {
			testenv.WantInvalidField(t, err, "key", "owner", "ttl", "wait")
			return
		}
		if p.key == "" || len(p.key) > MaxKeyBytes || !utf8.ValidString(p.key) || strings.Contains(p.key, "\x00") {
			t.Fatalf("accepted bad key %q", p.key)
		}
		if len(p.owner) > MaxOwnerBytes || p.owner != "" && len(p.owner) < MinOwnerBytes || !utf8.ValidString(p.owner) {
			t.Fatalf("accepted bad owner %q", p.owner)
		}
		if p.ttl < MinTTL || p.ttl > MaxTTL || p.wait < 0 || p.wait > MaxWait {
			t.Fatalf("accepted ttl %v wait %v", p.ttl, p.wait)
		}
		if !hasTTL && p.ttl != DefaultTTL {
			t.Fatalf("unset ttl became %v, want %v", p.ttl, DefaultTTL)
		}
		if !hasWait && p.wait != 0 {
			t.Fatalf("unset wait became %v", p.wait)
		}
	})
}
