package sqldb

import (
	"context"
	"database/sql/driver"
	"strconv"
	"strings"
)

// Numbered rewrites a statement written with ? placeholders (MySQL's and SQLite's) into
// PostgreSQL's numbered ones: the n-th ? outside quotes and comments becomes $n. A ? in a
// '…' string, a "…" identifier, a $tag$…$tag$ string or a comment is left alone.
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
			end := strings.Index(query[i+2:], "*/")
			if end < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+end+4])
			i += end + 3
			continue
		case c == '$':
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
