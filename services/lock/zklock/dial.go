package zklock

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// The client library waits ten receive timeouts (6.7 session timeouts) for the server's reply
// to its session handshake. A server that is starting up, as after a restart, can accept the
// connection and never answer; the client would sit out that whole wait, unavailable, while
// its session runs out on the server. sessionConn caps the deadlines the library sets until
// the server's first bytes arrive at a third of the session timeout (the Java client bounds
// its handshake alike, by the session timeout over the number of servers), so a silent server
// costs one short retry. After that the library's own deadlines apply unchanged.

// The same connections carry Close's abandonment (see Backend.Close): once abandoned is set,
// a write closes the socket instead of sending, and no new connection is dialed, so the
// library's closeSession is never sent and the session ends by expiry.

// errAbandoned is what the library sees from a connection of a closed backend.
var errAbandoned = errors.New("zklock: backend closed; its session is left to expire")

// dialer connects like net.DialTimeout with the handshake deadlines capped, and refuses once
// abandoned is set.
func dialer(session time.Duration, abandoned *atomic.Bool) func(network, address string, timeout time.Duration) (net.Conn, error) {
	limit := session / 3
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		if abandoned.Load() {
			return nil, errAbandoned
		}
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &sessionConn{Conn: c, limit: limit, abandoned: abandoned}, nil
	}
}

// sessionConn is a connection of the session whose deadlines are capped at limit from now until its first
// successful read, and whose writes fail once abandoned is set.
type sessionConn struct {
	net.Conn
	limit     time.Duration
	heard     atomic.Bool
	abandoned *atomic.Bool
}

func (c *sessionConn) Write(p []byte) (int, error) {
	if c.abandoned.Load() {
		c.Conn.Close()
		return 0, errAbandoned
	}
	return c.Conn.Write(p)
}

func (c *sessionConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.heard.Store(true)
	}
	return n, err
}

func (c *sessionConn) cap(t time.Time) time.Time {
	if t.IsZero() || c.heard.Load() {
		return t
	}
	if limit := time.Now().Add(c.limit); t.After(limit) {
		return limit
	}
	return t
}

func (c *sessionConn) SetDeadline(t time.Time) error     { return c.Conn.SetDeadline(c.cap(t)) }
func (c *sessionConn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.cap(t)) }
func (c *sessionConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.cap(t))
}
