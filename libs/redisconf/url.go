package redisconf

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Default ports of hosts a URL names without one.
const (
	redisPort    = "6379"
	sentinelPort = "26379"
)

// rawURL is a Redis URL cut into the parts the multi-host forms need; net/url cannot parse
// a comma-separated host list with IPv6 literals, so the authority is split by hand.
type rawURL struct {
	scheme   string   // lower case
	userinfo string   // as written (percent-encoded), without '@'
	hasUser  bool     // an '@' was present
	hosts    []string // as written
	path     string   // from '/' up to '?'
	query    string   // after '?', without it
}

// splitURL cuts raw into its parts; it checks only the shape every form shares.
func splitURL(raw string) (rawURL, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || scheme == "" {
		return rawURL{}, errors.New("redisconf: not a URL: want scheme://host, such as redis://127.0.0.1:6379")
	}
	u := rawURL{scheme: strings.ToLower(scheme)}
	if strings.ContainsRune(rest, '#') {
		return rawURL{}, errors.New("redisconf: a Redis URL has no #fragment")
	}
	rest, u.query, _ = strings.Cut(rest, "?")
	authority := rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, u.path = rest[:i], rest[i:]
	}
	// A raw '/' or '?' in a password ends the authority early and leaves "…@host" in the
	// path or query, where neither this parser nor Redact would know it for a secret: refuse
	// the URL, without quoting it.
	if strings.ContainsRune(u.path, '@') || strings.ContainsRune(u.query, '@') {
		return rawURL{}, errors.New("redisconf: '@' after the host: percent-encode '/', '?' and '@' in the user, the password and query values (%2F, %3F, %40)")
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		u.userinfo, u.hasUser, authority = authority[:i], true, authority[i+1:]
	}
	if authority != "" {
		u.hosts = strings.Split(authority, ",")
	}
	return u, nil
}

// parse hands the URL to the go-redis parser of its scheme, rewritten into the form that
// parser takes.
func (u rawURL) parse() (*Options, error) {
	base, kind, ok := strings.Cut(u.scheme, "+")
	if base != "redis" && base != "rediss" && !(base == "unix" && !ok) {
		return nil, fmt.Errorf("unknown scheme %q: want redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster", u.scheme)
	}
	switch {
	case !ok:
		if len(u.hosts) > 1 {
			return nil, fmt.Errorf("%d hosts in a %s:// URL: name a Cluster with %s+cluster:// or Sentinels with %s+sentinel://", len(u.hosts), u.scheme, base, base)
		}
		o, err := redis.ParseURL(u.rebuild(u.scheme, u.hosts, u.path, u.query))
		return &Options{Kind: Single, Simple: o}, err
	case kind == "cluster":
		return u.parseCluster(base)
	case kind == "sentinel":
		return u.parseSentinel(base)
	}
	return nil, fmt.Errorf("unknown scheme %q: want %s+sentinel or %s+cluster", u.scheme, base, base)
}

// parseCluster: redis+cluster://[userinfo@]h1,h2[?q] is go-redis's
// redis://[userinfo@]h1?addr=h2[&q].
func (u rawURL) parseCluster(base string) (*Options, error) {
	if p := strings.Trim(u.path, "/"); p != "" && p != "0" {
		return nil, fmt.Errorf("path %q: a Cluster has database 0 only", u.path)
	}
	hosts, err := withPorts(u.hosts, redisPort)
	if err != nil {
		return nil, err
	}
	q, err := url.ParseQuery(u.query)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	if q.Has("addr") {
		return nil, errors.New("addr in the query: list every node in the host part, comma-separated")
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	// go-redis's cluster parser knows no skip_verify, which its other two parsers take.
	skip := q.Get("skip_verify")
	q.Del("skip_verify")
	o, err := redis.ParseClusterURL(u.rebuild(base, hosts[:1], "", q.Encode()))
	if err != nil {
		return nil, err
	}
	switch {
	case skip == "" || skip == "false" || skip == "0":
	case skip != "true" && skip != "1":
		return nil, fmt.Errorf("skip_verify=%q: want true or false", skip)
	case o.TLSConfig == nil:
		return nil, errors.New("skip_verify needs rediss+cluster://")
	default:
		o.TLSConfig.InsecureSkipVerify = true
	}
	return &Options{Kind: Cluster, Cluster: o}, nil
}

// parseSentinel: redis+sentinel://[user:pass@]s1,s2[/db]?master=m[&sentinel_username=su&
// sentinel_password=sp][&q] is go-redis's
// redis://[su:sp@]s1/db?master_name=m&addr=s2&username=user&password=pass[&q]: the
// userinfo is the data nodes' credentials, as in every other form, and the sentinels' own
// (rarely set) go in the query.
func (u rawURL) parseSentinel(base string) (*Options, error) {
	hosts, err := withPorts(u.hosts, sentinelPort)
	if err != nil {
		return nil, err
	}
	q, err := url.ParseQuery(u.query)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	for _, k := range []string{"addr", "username", "password"} {
		if q.Has(k) {
			return nil, fmt.Errorf("%s in the query: sentinels go in the host part, the master's credentials in user:pass@", k)
		}
	}
	master := q.Get("master")
	if q.Has("master_name") {
		master = q.Get("master_name")
	}
	q.Del("master")
	if master == "" {
		return nil, errors.New("no master name: add ?master=<name as in the sentinels' monitor line>")
	}
	q.Set("master_name", master)
	if u.hasUser {
		user, err := url.Parse("redis://" + u.userinfo + "@h")
		if err != nil {
			return nil, fmt.Errorf("user:pass: %w", hideURL(err))
		}
		q.Set("username", user.User.Username())
		if p, ok := user.User.Password(); ok {
			q.Set("password", p)
		}
	}
	sentinelUser := ""
	if q.Has("sentinel_username") || q.Has("sentinel_password") {
		sentinelUser = url.UserPassword(q.Get("sentinel_username"), q.Get("sentinel_password")).String()
	}
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	s := rawURL{userinfo: sentinelUser, hasUser: sentinelUser != ""}
	o, err := redis.ParseFailoverURL(s.rebuild(base, hosts[:1], u.path, q.Encode()))
	return &Options{Kind: Sentinel, Failover: o}, err
}

// rebuild writes a URL with u's userinfo.
func (u rawURL) rebuild(scheme string, hosts []string, path, query string) string {
	var b strings.Builder
	b.WriteString(scheme + "://")
	if u.hasUser {
		b.WriteString(u.userinfo + "@")
	}
	b.WriteString(strings.Join(hosts, ","))
	b.WriteString(path)
	if query != "" {
		b.WriteString("?" + query)
	}
	return b.String()
}

// withPorts checks that every host is non-empty and gives the ones without a port def.
func withPorts(hosts []string, def string) ([]string, error) {
	if len(hosts) == 0 {
		return nil, errors.New("no host")
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, fmt.Errorf("host %d of %d is empty", i+1, len(hosts))
		}
		if host, port, err := net.SplitHostPort(h); err == nil {
			if host == "" || port == "" {
				return nil, fmt.Errorf("host %q: want host:port", h)
			}
			out[i] = h
			continue
		}
		if strings.Count(h, ":") > 1 && !strings.HasPrefix(h, "[") {
			return nil, fmt.Errorf("host %q: write an IPv6 address in brackets, [::1]:6379", h)
		}
		out[i] = net.JoinHostPort(strings.Trim(h, "[]"), def)
	}
	return out, nil
}
