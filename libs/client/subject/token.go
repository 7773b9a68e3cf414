package subject

import (
	"errors"
	"strings"
)

// ErrBadToken means a string is not the output of Token.
var ErrBadToken = errors.New("subject: not a subject token made by Token")

// Token encodes any string as exactly one valid NATS subject token, injectively, so every
// key has its own subject and a subscriber can name one key or all of them with `>`.
//
// Letters, digits and the bytes - _ : = @ / ~ + stay as they are, so plain keys such as
// order:42 or jobs/7 read as themselves; every other byte (dots, spaces, '*', '>', '%',
// control bytes and each byte of a non-ASCII character) becomes %XX, two upper-case hex
// digits. The empty string becomes a lone "%", which no non-empty input produces. The result
// never holds '.', whitespace or a wildcard, and is at most three times the input's length.
func Token(s string) string {
	if s == "" {
		return "%"
	}
	plain := true
	for i := 0; i < len(s); i++ {
		if !keep(s[i]) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) * 3)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if keep(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

// ParseToken inverts Token; it fails with ErrBadToken on anything Token does not produce.
func ParseToken(tok string) (string, error) {
	if tok == "%" {
		return "", nil
	}
	if tok == "" {
		return "", ErrBadToken
	}
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case keep(c):
			b.WriteByte(c)
		case c == '%' && i+2 < len(tok) && upperHex(tok[i+1]) && upperHex(tok[i+2]):
			v := unhex(tok[i+1])<<4 | unhex(tok[i+2])
			if keep(v) { // Token never escapes a byte it keeps
				return "", ErrBadToken
			}
			b.WriteByte(v)
			i += 2
		default:
			return "", ErrBadToken
		}
	}
	return b.String(), nil
}

// keep reports whether Token leaves c as it is.
func keep(c byte) bool { return kept[c] }

// kept is keep's answer for every byte: letters, digits and - _ : = @ / ~ +.
var kept = func() (t [256]bool) {
	for c := range t {
		b := byte(c)
		t[c] = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
			strings.IndexByte("-_:=@/~+", b) >= 0
	}
	return t
}()

func upperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}
