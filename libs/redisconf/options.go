package redisconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/redis/go-redis/v9"
)

// Options is a parsed Redis URL: the go-redis options of its Kind, exactly one of Simple,
// Failover and Cluster set.
type Options struct {
	// Kind is the deployment the URL names.
	Kind Kind
	// Simple are the options of a Single node.
	Simple *redis.Options
	// Failover are the options of a Sentinel set.
	Failover *redis.FailoverOptions
	// Cluster are the options of a Cluster.
	Cluster *redis.ClusterOptions
}

// Parse parses a Redis URL in one of the package's forms with go-redis's own parsers
// (redis.ParseURL, redis.ParseFailoverURL, redis.ParseClusterURL) and applies the settings
// the backends need:
//
//   - retries off (MaxRetries -1, and on a Cluster MaxRedirects -1): a client cannot know
//     whether a script whose reply was lost ran, and running an acquire twice counts one
//     re-entry as two holds. A URL that asks for retries (max_retries or max_redirects above
//     0) is refused.
//   - a pool of DefaultPoolSize connections unless the URL sets pool_size.
//   - replies awaited no longer than the call's context allows (ContextTimeoutEnabled):
//     without it go-redis waits out its own read timeout (3s) whatever the deadline, and a
//     stalled server holds a call, and a shutdown waiting for it, past its deadline.
//
// Errors never contain the URL's password.
func Parse(rawURL string) (*Options, error) {
	u, err := splitURL(rawURL)
	if err != nil {
		return nil, err
	}
	o, err := u.parse()
	if err != nil {
		return nil, fmt.Errorf("redisconf: %w", hideURL(err))
	}
	if err := o.applyDefaults(); err != nil {
		return nil, err
	}
	return o, nil
}

// NewClient returns the client of o's Kind: redis.NewClient, redis.NewFailoverClient or
// redis.NewClusterClient, the constructors redis.NewUniversalClient picks between.
func (o *Options) NewClient() redis.UniversalClient {
	switch o.Kind {
	case Sentinel:
		return redis.NewFailoverClient(o.Failover)
	case Cluster:
		return redis.NewClusterClient(o.Cluster)
	}
	return redis.NewClient(o.Simple)
}

// applyDefaults sets the pool size and turns retries off, refusing a URL that asked for them.
func (o *Options) applyDefaults() error {
	retries, redirects, pool, contextTimeout, tlsConf := o.fields()
	if *retries > 0 {
		return fmt.Errorf("redisconf: max_retries=%d: the backends' scripts must not be retried blindly; leave it out", *retries)
	}
	*retries = -1
	if redirects != nil {
		if *redirects > 0 {
			return fmt.Errorf("redisconf: max_redirects=%d: a redirect is also a retry of a script that may have run; leave it out", *redirects)
		}
		// go-redis's cluster client retries a command whose connection broke after it was
		// sent up to MaxRedirects times, whatever MaxRetries says: -1 turns that off (and
		// with it the following of MOVED, so a resharding costs one failed call per
		// client while it reloads the slot map).
		*redirects = -1
	}
	if *pool == 0 {
		*pool = DefaultPoolSize
	}
	*contextTimeout = true
	if t := *tlsConf; t != nil {
		t.MinVersion = max(t.MinVersion, tls.VersionTLS12)
		if o.Kind != Single {
			// go-redis names the first host as every server's: verify each sentinel and node
			// against its own address instead (tls.DialWithDialer does when this is empty).
			t.ServerName = ""
		}
	}
	return nil
}

// fields points at the settings applyDefaults and trustCAFile change in o's options.
func (o *Options) fields() (retries, redirects, pool *int, contextTimeout *bool, tlsConf **tls.Config) {
	switch o.Kind {
	case Sentinel:
		f := o.Failover
		return &f.MaxRetries, nil, &f.PoolSize, &f.ContextTimeoutEnabled, &f.TLSConfig
	case Cluster:
		c := o.Cluster
		return &c.MaxRetries, &c.MaxRedirects, &c.PoolSize, &c.ContextTimeoutEnabled, &c.TLSConfig
	}
	r := o.Simple
	return &r.MaxRetries, nil, &r.PoolSize, &r.ContextTimeoutEnabled, &r.TLSConfig
}

// TLS reports whether o connects over TLS.
func (o *Options) TLS() bool {
	_, _, _, _, t := o.fields()
	return *t != nil
}

// trustCAFile verifies the servers against the certificate authorities in the PEM file
// path instead of the system's roots.
func (o *Options) trustCAFile(path string) error {
	_, _, _, _, t := o.fields()
	if *t == nil {
		return errors.New("redisconf: a CA file needs a TLS URL (rediss://, rediss+sentinel:// or rediss+cluster://)")
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("redisconf: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("redisconf: CA file %s holds no PEM certificate", path)
	}
	(*t).RootCAs = pool
	return nil
}

// hideURL drops the URL a net/url error carries, which may hold a password, keeping what
// went wrong.
func hideURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("invalid URL: %w", ue.Err)
	}
	return err
}
