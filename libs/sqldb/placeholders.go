package sqldb

import (
	"context"
	"database/sql/driver"
	"strconv"
	"strings"
)

// Numbered rewrites a statement written with ? placeholders (MySQL's and SQLite's) into
// PostgreSQL's numbered ones: the n-th ? outside quotes and comments becomes $n. A ? in a
// '…' string, an E'…' escape string (where \' is a quote inside it), a "…" identifier, a
// $tag$…$tag$ string or a comment (block comments nest) is left alone; a $ inside an
// identifier (a$b) starts no $tag$ string. PostgreSQL's own ? operators (jsonb's) cannot be
// written: every ? outside those is a placeholder.
func Numbered(query string) string {
	if strings.IndexByte(query, '?') < 0 {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		case c == '\'' && escapeStringAt(query, i):
			end := escapeStringEnd(query[i+1:])
			if end < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+end+2])
			i += end + 1
			continue
		case c == '\'' || c == '"':
			end := strings.IndexByte(query[i+1:], c)
			if end < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			// A doubled quote inside ('it''s') ends and starts again: copied as is.
			b.WriteString(query[i : i+end+2])
			i += end + 1
			continue
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			end := strings.IndexByte(query[i:], '\n')
			if end < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+end+1])
			i += end
			continue
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			end := blockCommentEnd(query[i:])
			if end < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+end])
			i += end - 1
			continue
		case c == '$' && (i == 0 || !identByte(query[i-1])):
			if tag, ok := dollarTag(query[i:]); ok {
				end := strings.Index(query[i+len(tag):], tag)
				if end < 0 {
					b.WriteString(query[i:])
					return b.String()
				}
				b.WriteString(query[i : i+len(tag)+end+len(tag)])
				i += len(tag) + end + len(tag) - 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// escapeStringAt says whether the quote at query[i] opens an escape string: E'…' or e'…',
// where the E is not the end of a longer word.
func escapeStringAt(query string, i int) bool {
	return i > 0 && (query[i-1] == 'E' || query[i-1] == 'e') && (i < 2 || !identByte(query[i-2]))
}

// escapeStringEnd is the index in s, the text after an escape string's opening quote, of its
// closing quote, or -1: a backslash escapes the byte after it, and a doubled quote is one
// quote inside.
func escapeStringEnd(s string) int {
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '\'':
			if j+1 < len(s) && s[j+1] == '\'' {
				j++
				continue
			}
			return j
		}
	}
	return -1
}

// blockCommentEnd is the index just past the end of the block comment that starts s, or -1
// when it does not end: PostgreSQL's block comments nest.
func blockCommentEnd(s string) int {
	depth := 0
	for j := 0; j+1 < len(s); j++ {
		switch {
		case s[j] == '/' && s[j+1] == '*':
			depth++
			j++
		case s[j] == '*' && s[j+1] == '/':
			depth--
			j++
			if depth == 0 {
				return j + 1
			}
		}
	}
	return -1
}

// identByte says whether c may continue an identifier or keyword: a letter, a digit, _, $,
// or a byte of a multi-byte UTF-8 character.
func identByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// dollarTag is the $tag$ that starts s, if s starts a dollar-quoted string.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > 1 && c >= '0' && c <= '9':
		default:
			return "", false
		}
	}
	return "", false
}

// placeholderConnector opens connections whose statements are rewritten by Numbered before
// the driver sees them.
type placeholderConnector struct{ driver.Connector }

// Connect implements driver.Connector.
func (c placeholderConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &numberedConn{conn: conn.(pgxConn)}, nil
}

// pgxConn is what pgx's database/sql connection implements, and so what numberedConn
// passes on.
type pgxConn interface {
	driver.Conn
	driver.ConnPrepareContext
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.NamedValueChecker
	driver.SessionResetter
}

// numberedConn is a pgx connection taking ? placeholders.
type numberedConn struct{ conn pgxConn }

var _ pgxConn = (*numberedConn)(nil)

func (c *numberedConn) Prepare(query string) (driver.Stmt, error) {
	return c.conn.Prepare(Numbered(query))
}

func (c *numberedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.conn.PrepareContext(ctx, Numbered(query))
}

func (c *numberedConn) Close() error { return c.conn.Close() }

func (c *numberedConn) Begin() (driver.Tx, error) {
	return c.conn.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *numberedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.conn.BeginTx(ctx, opts)
}

func (c *numberedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.conn.ExecContext(ctx, Numbered(query), args)
}

func (c *numberedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.conn.QueryContext(ctx, Numbered(query), args)
}

func (c *numberedConn) Ping(ctx context.Context) error { return c.conn.Ping(ctx) }

func (c *numberedConn) CheckNamedValue(v *driver.NamedValue) error { return c.conn.CheckNamedValue(v) }

func (c *numberedConn) ResetSession(ctx context.Context) error { return c.conn.ResetSession(ctx) }
