package sqldb

import "testing"

func TestNumbered(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"SELECT ?", "SELECT $1"},
		{"UPDATE t SET a = ?, b = ? WHERE c = ? AND d > ?", "UPDATE t SET a = $1, b = $2 WHERE c = $3 AND d > $4"},
		{"SELECT '?' FROM t WHERE a = ?", "SELECT '?' FROM t WHERE a = $1"},
		{"SELECT 'it''s ?' , ?", "SELECT 'it''s ?' , $1"},
		{`SELECT "col?" FROM t WHERE a = ?`, `SELECT "col?" FROM t WHERE a = $1`},
		{"SELECT ? -- why?\n, ?", "SELECT $1 -- why?\n, $2"},
		{"SELECT ? /* a ? here */ , ?", "SELECT $1 /* a ? here */ , $2"},
		{"SELECT $$ ? $$, ?", "SELECT $$ ? $$, $1"},
		{"SELECT $tag$ ? $tag$, ?", "SELECT $tag$ ? $tag$, $1"},
		{"SELECT $1", "SELECT $1"},
		{"SELECT 'open ?", "SELECT 'open ?"},
		{"SELECT ? -- open ?", "SELECT $1 -- open ?"},
		{"SELECT ?/* open ?", "SELECT $1/* open ?"},
		{"VALUES " + "(?, ?), (?, ?), (?, ?), (?, ?), (?, ?), (?, ?)", "VALUES ($1, $2), ($3, $4), ($5, $6), ($7, $8), ($9, $10), ($11, $12)"},
		{`SELECT E'it\'s ?', ?`, `SELECT E'it\'s ?', $1`},
		{`SELECT e'\\', ?`, `SELECT e'\\', $1`},
		{`SELECT E'a''?', ?`, `SELECT E'a''?', $1`},
		{`SELECT TYPE'?', ?`, `SELECT TYPE'?', $1`},
		{"SELECT /* a /* b */ ? */ ?", "SELECT /* a /* b */ ? */ $1"},
		{"SELECT ? /* open /* ? */ ?", "SELECT $1 /* open /* ? */ ?"},
		{"SELECT a$b$, ?, c$b$", "SELECT a$b$, $1, c$b$"},
		{"SELECT x$ || $q$?$q$ || ?", "SELECT x$ || $q$?$q$ || $1"},
	} {
		if got := Numbered(tc.in); got != tc.want {
			t.Errorf("Numbered(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzNumbered(f *testing.F) {
	f.Add("SELECT ? FROM t WHERE a = '?' AND b = ?")
	f.Add("$a$ ? $a$ -- ?\n/* ? */ ?")
	f.Fuzz(func(t *testing.T, q string) {
		out := Numbered(q)
		if len(out) < len(q) {
			t.Fatalf("Numbered(%q) = %q: shorter than its input", q, out)
		}
	})
}
