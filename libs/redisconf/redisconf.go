// Package redisconf turns a Redis URL into a go-redis client for a single node, a Sentinel
// set or a Cluster, with the settings the coordkit backends need, and redacts such URLs for
// logs and errors.
//
// URL forms (see Parse):
//
//	redis://[user:pass@]host[:6379][/db][?options]          one node
//	rediss://[user:pass@]host[:6379][/db][?options]         one node over TLS
//	unix://[user:pass@]/path/to/redis.sock[?db=N&options]   one node on a Unix socket
//	redis+sentinel://[user:pass@]h1[:26379],h2[:26379][/db]?master=name[&sentinel_password=..]
//	redis+cluster://[user:pass@]h1[:6379],h2[:6379][?options]
//
// and rediss+sentinel:// and rediss+cluster:// for TLS. The options are go-redis's own
// (snake_case field names such as dial_timeout=3s; see redis.ParseURL): this package only
// rewrites the multi-host forms into the URLs go-redis's parsers take, and never parses
// options itself.
package redisconf

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// DefaultPoolSize is the connection pool size (per node on a Cluster) when the URL sets
// none: the lock backend runs a few hundred scripts at once under contention.
const DefaultPoolSize = 256

// Kind is the Redis deployment a URL names.
type Kind string

// The kinds of deployment.
const (
	// Single is one Redis node (redis://, rediss://, unix://).
	Single Kind = "single"
	// Sentinel is a master found through Redis Sentinel (redis+sentinel://).
	Sentinel Kind = "sentinel"
	// Cluster is a Redis Cluster (redis+cluster://).
	Cluster Kind = "cluster"
)

// Config is how a process reaches Redis: URL, or Addr as the shorthand of redis://Addr.
type Config struct {
	// URL is a Redis URL in one of the package's forms.
	URL string
	// Addr is host:port of a single node without password or TLS; it must not be set
	// together with URL.
	Addr string
	// CAFile is a PEM file of the certificate authorities a TLS URL's servers are verified
	// against; empty uses the system's roots. It needs a rediss URL.
	CAFile string
}

// Enabled says whether the config names a Redis at all.
func (c Config) Enabled() bool { return c.URL != "" || c.Addr != "" }

// ErrBothURLAndAddr means a Config named Redis twice.
var ErrBothURLAndAddr = errors.New("redisconf: give a Redis URL or an address, not both")

// Options returns the client options c describes, with the package's defaults applied.
func (c Config) Options() (*Options, error) {
	raw := c.URL
	switch {
	case c.URL != "" && c.Addr != "":
		return nil, ErrBothURLAndAddr
	case c.Addr != "":
		raw = "redis://" + c.Addr
	case c.URL == "":
		return nil, errors.New("redisconf: no Redis URL or address")
	}
	o, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	if c.CAFile != "" {
		if err := o.trustCAFile(c.CAFile); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Open builds the client c describes and checks that Redis answers PING (on a Sentinel URL,
// that a sentinel names the master and the master answers). The caller closes the client.
// Errors never contain the URL's secrets; wrap them with Redact(c.URL) to name the URL.
func Open(ctx context.Context, c Config) (redis.UniversalClient, error) {
	o, err := c.Options()
	if err != nil {
		return nil, err
	}
	rdb := o.NewClient()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redisconf: %s PING: %w", o.Kind, err)
	}
	return rdb, nil
}
