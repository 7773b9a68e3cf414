package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/server"
)

// TestQuote pins how errors show client values: short ones whole, long ones as a prefix of
// at most MaxQuoteBytes cut between characters, with their length, always valid UTF-8.
func TestQuote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"short", "abc", `"abc"`},
		{"empty", "", `""`},
		{"quotes escaped", `a"b\c`, `"a\"b\\c"`},
		{"control escaped", "a\nb", `"a\nb"`},
		{"invalid UTF-8 escaped", "a\xffb", `"a\xffb"`},
		{"exactly the limit", strings.Repeat("x", 64), `"` + strings.Repeat("x", 64) + `"`},
		{"one over", strings.Repeat("x", 65), `"` + strings.Repeat("x", 64) + `…" (65 bytes)`},
		{"1 MB", strings.Repeat("y", 1<<20), `"` + strings.Repeat("y", 64) + `…" (1048576 bytes)`},
		{"multibyte not split", strings.Repeat("é", 40), `"` + strings.Repeat("é", 32) + `…" (80 bytes)`},
		{"escapes count as quoted", strings.Repeat("\xff", 100), `"` + strings.Repeat(`\xff`, 16) + `…" (100 bytes)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := server.Quote(tt.in)
			if got != tt.want {
				t.Fatalf("Quote = %s, want %s", got, tt.want)
			}
			if !utf8.ValidString(got) || len(got) > server.MaxQuoteBytes+30 {
				t.Fatalf("Quote = %q: invalid UTF-8 or longer than %d bytes", got, server.MaxQuoteBytes+30)
			}
		})
	}
}

// TestDurationInMessage: an out-of-range duration's error says what the request said (not
// the 2562047h47m16.85s a time.Duration saturates at) and the allowed range in plain units.
func TestDurationInMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   *durationpb.Duration
		want string
	}{
		{"absurd", &durationpb.Duration{Seconds: 315576000000}, "ttl: 315576000000s (about 10000 years) is outside the allowed range, 100ms to 24h"},
		{"100 days", &durationpb.Duration{Seconds: 8640000}, "ttl: 8640000s (100d) is outside the allowed range, 100ms to 24h"},
		{"a day and a second", &durationpb.Duration{Seconds: 86401}, "ttl: 86401s (24h1s) is outside the allowed range, 100ms to 24h"},
		{"too short", &durationpb.Duration{Nanos: 50_000_000}, "ttl: 0.05s is outside the allowed range, 100ms to 24h"},
		{"negative", &durationpb.Duration{Seconds: -3, Nanos: -500_000_000}, "ttl: -3.5s is outside the allowed range, 100ms to 24h"},
		{"absurdly negative", &durationpb.Duration{Seconds: -315576000000}, "ttl: -315576000000s (about 10000 years) is outside the allowed range, 100ms to 24h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := server.DurationIn("ttl", tt.in, 30*time.Second, 100*time.Millisecond, 24*time.Hour)
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
				t.Fatalf("err = %v, want invalid_argument", err)
			}
			if ce.Message() != tt.want {
				t.Fatalf("message = %q, want %q", ce.Message(), tt.want)
			}
		})
	}
}

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		100 * time.Millisecond: "100ms", 1500 * time.Millisecond: "1.5s", 30 * time.Second: "30s",
		10 * time.Minute: "10m", 90 * time.Minute: "1h30m", 24 * time.Hour: "24h", time.Hour: "1h",
		84 * time.Hour: "3d12h", 0: "0s", 1500 * time.Microsecond: "1.5ms", 86401 * time.Second: "24h1s",
		-2 * time.Second: "-2s",
	} {
		if got := server.HumanDuration(d); got != want {
			t.Errorf("HumanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
