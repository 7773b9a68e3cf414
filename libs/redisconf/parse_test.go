package redisconf_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/redisconf"
)

// got is what a test reads back from parsed options, whatever their kind.
type got struct {
	kind                       redisconf.Kind
	addrs                      []string
	user, pass                 string
	sentinelUser, sentinelPass string
	master                     string
	db, pool, retries          int
	redirects                  int
	tls, skipVerify            bool
	contextTimeout             bool
}

func read(o *redisconf.Options) got {
	g := got{kind: o.Kind}
	switch o.Kind {
	case redisconf.Single:
		s := o.Simple
		g.addrs, g.user, g.pass, g.db, g.pool, g.retries = []string{s.Addr}, s.Username, s.Password, s.DB, s.PoolSize, s.MaxRetries
		g.tls, g.contextTimeout = s.TLSConfig != nil, s.ContextTimeoutEnabled
		g.skipVerify = g.tls && s.TLSConfig.InsecureSkipVerify
	case redisconf.Sentinel:
		f := o.Failover
		g.addrs, g.user, g.pass, g.db, g.pool, g.retries = f.SentinelAddrs, f.Username, f.Password, f.DB, f.PoolSize, f.MaxRetries
		g.sentinelUser, g.sentinelPass, g.master = f.SentinelUsername, f.SentinelPassword, f.MasterName
		g.tls, g.contextTimeout = f.TLSConfig != nil, f.ContextTimeoutEnabled
	case redisconf.Cluster:
		c := o.Cluster
		g.addrs, g.user, g.pass, g.pool, g.retries, g.redirects = c.Addrs, c.Username, c.Password, c.PoolSize, c.MaxRetries, c.MaxRedirects
		g.tls, g.contextTimeout = c.TLSConfig != nil, c.ContextTimeoutEnabled
		g.skipVerify = g.tls && c.TLSConfig.InsecureSkipVerify
	}
	return g
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url  string
		want got
	}{
		{"redis://127.0.0.1:6379", got{kind: redisconf.Single, addrs: []string{"127.0.0.1:6379"}}},
		{"redis://h", got{kind: redisconf.Single, addrs: []string{"h:6379"}}},
		{"REDIS://h:1/3", got{kind: redisconf.Single, addrs: []string{"h:1"}, db: 3}},
		{"redis://u:p%40ss@h:1/2?pool_size=8", got{kind: redisconf.Single, addrs: []string{"h:1"}, user: "u", pass: "p@ss", db: 2, pool: 8}},
		{"redis://:pw@[::1]:7000", got{kind: redisconf.Single, addrs: []string{"[::1]:7000"}, pass: "pw"}},
		{"rediss://h:6380?skip_verify=true", got{kind: redisconf.Single, addrs: []string{"h:6380"}, tls: true, skipVerify: true}},
		{"unix://:pw@/run/redis.sock?db=4", got{kind: redisconf.Single, addrs: []string{"/run/redis.sock"}, pass: "pw", db: 4}},
		{"redis+sentinel://s1,s2:26380,[::1]/5?master=mymaster", got{kind: redisconf.Sentinel,
			addrs: []string{"s1:26379", "s2:26380", "[::1]:26379"}, master: "mymaster", db: 5}},
		{"redis+sentinel://app:pw@s1:1?master_name=m&sentinel_username=su&sentinel_password=s%26p", got{kind: redisconf.Sentinel,
			addrs: []string{"s1:1"}, user: "app", pass: "pw", sentinelUser: "su", sentinelPass: "s&p", master: "m"}},
		{"rediss+sentinel://s1?master=m", got{kind: redisconf.Sentinel, addrs: []string{"s1:26379"}, master: "m", tls: true}},
		{"redis+cluster://:pw@n1:7000,n2:7001,n3", got{kind: redisconf.Cluster, addrs: []string{"n1:7000", "n2:7001", "n3:6379"}, pass: "pw"}},
		{"rediss+cluster://n1:7000/0?skip_verify=true&pool_size=10", got{kind: redisconf.Cluster, addrs: []string{"n1:7000"}, tls: true, skipVerify: true, pool: 10}},
	} {
		o, err := redisconf.Parse(c.url)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.url, err)
			continue
		}
		want := c.want
		// Every kind gets the backends' settings.
		if want.pool == 0 {
			want.pool = redisconf.DefaultPoolSize
		}
		want.retries, want.contextTimeout = -1, true
		if want.kind == redisconf.Cluster {
			want.redirects = -1
		}
		if g := read(o); !equal(g, want) {
			t.Errorf("Parse(%q) =\n %+v, want\n %+v", c.url, g, want)
		}
	}
}

func equal(a, b got) bool {
	return slices.Equal(a.addrs, b.addrs) && fmt.Sprint(a) == fmt.Sprint(b)
}

// TestParseRefuses: every malformed URL is refused with an error that says why, and never
// holds the password.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	const secret = "hunter2secret"
	for _, c := range []struct{ url, why string }{
		{"127.0.0.1:6379", "not a URL"},
		{"http://:" + secret + "@h", "unknown scheme"},
		{"redis+nope://:" + secret + "@h", "unknown scheme"},
		{"redis://:" + secret + "@h1,h2", "redis+cluster"},
		{"redis://:" + secret + "@h/x", "database number"},
		{"redis://:" + secret + "@h?max_retries=3", "max_retries"},
		{"redis://:" + secret + "@h?bogus=1", "unexpected option"},
		{"redis://:" + secret + "@h#frag", "fragment"},
		{"redis://:" + secret + "%zz@h", "invalid URL"},
		{"redis://:" + secret + "@h:notaport", "invalid URL"},
		{"redis+cluster://:" + secret + "@h1,,h3", "empty"},
		{"redis+cluster://:" + secret + "@h1/2", "database 0"},
		{"redis+cluster://:" + secret + "@h1?addr=h2:1", "host part"},
		{"redis+cluster://:" + secret + "@h1?max_redirects=2", "max_redirects"},
		{"redis+cluster://:" + secret + "@h1?skip_verify=true", "rediss+cluster"},
		{"redis+cluster://:" + secret + "@::1", "brackets"},
		{"redis+sentinel://:" + secret + "@s1", "master"},
		{"redis+sentinel://s1?master=m&password=" + secret, "credentials"},
		{"redis+sentinel://:" + secret + "@", "no host"},
		{"redis://:" + secret + "/x@h:6379", "percent-encode"},
		{"redis://:" + secret + "?x@h:6379", "percent-encode"},
		{"redis+cluster://:" + secret + "/x@h1,h2", "percent-encode"},
		{"redis+sentinel://:pw@s1?master=m&sentinel_password=" + secret + "@x", "percent-encode"},
	} {
		_, err := redisconf.Parse(c.url)
		switch {
		case err == nil:
			t.Errorf("Parse(%q) succeeded, want an error about %s", c.url, c.why)
		case !strings.Contains(err.Error(), c.why):
			t.Errorf("Parse(%q) = %v, want an error about %s", c.url, err, c.why)
		case strings.Contains(err.Error(), secret):
			t.Errorf("Parse(%q) = %v: the error shows the password", c.url, err)
		}
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	if _, err := (redisconf.Config{URL: "redis://h", Addr: "h:1"}).Options(); !errors.Is(err, redisconf.ErrBothURLAndAddr) {
		t.Errorf("URL and Addr = %v, want ErrBothURLAndAddr", err)
	}
	o, err := (redisconf.Config{Addr: "h:1"}).Options()
	if err != nil || o.Kind != redisconf.Single || o.Simple.Addr != "h:1" || o.Simple.MaxRetries != -1 || o.Simple.PoolSize != redisconf.DefaultPoolSize {
		t.Errorf("Addr h:1 = %+v, %v; want redis://h:1 with the defaults", o, err)
	}
	if _, err := (redisconf.Config{Addr: "h:1", CAFile: "/nonexistent"}).Options(); err == nil || !strings.Contains(err.Error(), "TLS URL") {
		t.Errorf("a CA file on redis:// = %v, want an error asking for a TLS URL", err)
	}
	if _, err := (redisconf.Config{URL: "rediss://h", CAFile: "/nonexistent"}).Options(); err == nil {
		t.Error("a missing CA file was accepted")
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"redis://h:1/0", "redis://h:1/0"},
		{"redis://user:s3cret@h:1/0", "redis://user:xxxxx@h:1/0"},
		{"redis://:s3cret@h:1", "redis://:xxxxx@h:1"},
		{"redis://s3cret@h:1", "redis://xxxxx@h:1"},
		{"redis://u:s3:cr@et@h:1", "redis://u:xxxxx@h:1"},
		{"redis+sentinel://:s3cret@a,b/0?master=m&sentinel_password=s3cret", "redis+sentinel://:xxxxx@a,b/0?master=m&sentinel_password=xxxxx"},
		{"redis+sentinel://a?Password=s3cret", "redis+sentinel://a?Password=xxxxx"},
		{"redis://h?x=%zzs3cret", "redis://h?xxxxx"},
		{"h:1 s3cret", "(invalid Redis URL, hidden)"},
		{"redis://:s3/cret@h:1", "(invalid Redis URL, hidden)"},
		{"redis://:s3?cret@h:1", "(invalid Redis URL, hidden)"},
	} {
		if got := redisconf.Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
