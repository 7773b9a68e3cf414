package server_test

import (
	"strings"
	"testing"
	"unicode/utf8"

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
