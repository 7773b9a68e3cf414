package subject_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/coordkit/coordkit/libs/client/subject"
)

func TestToken(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"order:42", "order:42"},
		{"jobs/7", "jobs/7"},
		{"a.b", "a%2Eb"},
		{"*", "%2A"},
		{">", "%3E"},
		{"two words", "two%20words"},
		{"50%", "50%25"},
		{"é", "%C3%A9"},
		{"", "%"},
		{"\x00", "%00"},
		{"tab\there", "tab%09here"},
	}
	for _, tt := range tests {
		got := subject.Token(tt.in)
		if got != tt.want {
			t.Errorf("Token(%q) = %q, want %q", tt.in, got, tt.want)
		}
		back, err := subject.ParseToken(got)
		if err != nil || back != tt.in {
			t.Errorf("ParseToken(%q) = %q, %v; want %q", got, back, err, tt.in)
		}
	}
}

func TestParseTokenRefusesForeignTokens(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{"", "a.b", "%2", "%2e", "%41", "%%", "a b", "*", ">", "é"} {
		if got, err := subject.ParseToken(tok); err == nil {
			t.Errorf("ParseToken(%q) = %q, nil; want ErrBadToken", tok, got)
		}
	}
}

// validToken is NATS's rule for one literal token of a subject that a publisher may use.
func validToken(tok string) bool {
	if tok == "" || tok == "*" || tok == ">" {
		return false
	}
	return !strings.ContainsAny(tok, ". \t\r\n*>") && utf8.ValidString(tok)
}

// FuzzToken: every input maps to one valid token, and back to itself; so two different
// inputs never share a token.
func FuzzToken(f *testing.F) {
	for _, s := range []string{"", "order:42", "a.b.c", "*.>", "日本", "\xff\xfe", strings.Repeat("x.", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := subject.Token(s)
		if !validToken(tok) {
			t.Fatalf("Token(%q) = %q is not one valid NATS token", s, tok)
		}
		if len(tok) > 3*max(len(s), 1) {
			t.Fatalf("Token(%q) is %d bytes, more than 3× the input", s, len(tok))
		}
		back, err := subject.ParseToken(tok)
		if err != nil || back != s {
			t.Fatalf("ParseToken(Token(%q)) = %q, %v", s, back, err)
		}
	})
}

func TestLockSubject(t *testing.T) {
	t.Parallel()
	keys := []string{"order:42", "a.b", "a%2Eb", "*", ">", "two words", "日本語", "", strings.Repeat("k.", 256)}
	seen := map[string]string{}
	for _, key := range keys {
		subj := subject.Lock(subject.Released, "redis", key)
		if prev, dup := seen[subj]; dup {
			t.Fatalf("keys %q and %q share the subject %q", prev, key, subj)
		}
		seen[subj] = key
		toks := strings.Split(subj, ".")
		if len(toks) != 6 {
			t.Fatalf("subject of %q = %q has %d tokens, want 6", key, subj, len(toks))
		}
		for _, tok := range toks {
			if !validToken(tok) {
				t.Fatalf("subject of %q = %q has the invalid token %q", key, subj, tok)
			}
		}
		kind, backend, back, ok := subject.ParseLock(subj)
		if !ok || kind != subject.Released || backend != "redis" || back != key {
			t.Fatalf("ParseLock(%q) = %q, %q, %q, %v", subj, kind, backend, back, ok)
		}
	}
	if got := subject.Lock(subject.Acquired, "redis", "order:42"); got != "coordkit.lock.v1.acquired.redis.order:42" {
		t.Errorf("a plain key's subject = %q, want it readable", got)
	}
	if got := subject.LockPattern(subject.Released, "*"); got != "coordkit.lock.v1.released.*.>" {
		t.Errorf("LockPattern = %q", got)
	}
	for _, bad := range []string{"coordkit.lock.v1.released.redis", "other.lock.v1.released.redis.k", "coordkit.lock.v1.released.redis.a b"} {
		if _, _, _, ok := subject.ParseLock(bad); ok {
			t.Errorf("ParseLock(%q) accepted a subject Lock does not make", bad)
		}
	}
}

func TestTaskAvailableSubject(t *testing.T) {
	for _, pool := range []string{"emails", "a.b", "*", ">", "", " x ", "日本", "%41"} {
		subj := subject.TaskAvailable("redis", pool)
		b, p, ok := subject.ParseTaskAvailable(subj)
		if !ok || b != "redis" || p != pool {
			t.Errorf("ParseTaskAvailable(%q) = %q, %q, %v; want redis, %q", subj, b, p, ok, pool)
		}
	}
	if _, _, ok := subject.ParseTaskAvailable("coordkit.taskpick.v1.available.redis"); ok {
		t.Error("a subject without a pool parsed")
	}
}
