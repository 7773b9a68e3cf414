package redlock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock/redislock"
)

// The attack tests drive the backend through scripters that let a test run code around any
// script call on any node, so an interleaving that a storm hits only now and then can be
// forced every time.

// scriptNames names the backend's scripts by SHA1, for hooks.
var scriptNames = func() map[string]string {
	m := map[string]string{}
	for name, s := range map[string]*redis.Script{
		"acquire": acquireScript, "stamp": stampScript, "undo": undoScript,
		"release": releaseScript, "renew": renewScript,
	} {
		m[s.Hash()] = name
	}
	return m
}()

// hookFn runs around one script call: script is the script's name ("acquire", "stamp", ...),
// node the node's index, and run makes the call.
type hookFn func(script string, node int, run func() *redis.Cmd) *redis.Cmd

// interceptor is a node's scripter that runs every script call through hook.
type interceptor struct {
	redis.Scripter
	node int
	hook hookFn
}

func (s interceptor) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return s.hook(scriptNames[sha], s.node, func() *redis.Cmd { return s.Scripter.EvalSha(ctx, sha, keys, args...) })
}

func (s interceptor) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	sum := sha1.Sum([]byte(script))
	return s.hook(scriptNames[hex.EncodeToString(sum[:])], s.node, func() *redis.Cmd { return s.Scripter.Eval(ctx, script, keys, args...) })
}

// nodeClients makes one client per node as Open does (no retries, the context bounds the
// reply), straight to the node or through its proxy.
func (c *cluster) nodeClients(viaProxy bool) []*redis.Client {
	c.t.Helper()
	var out []*redis.Client
	for i, d := range c.direct {
		addr := d.Options().Addr
		if viaProxy {
			addr = c.proxies[i].Addr()
		}
		cl := redis.NewClient(&redis.Options{
			Addr: addr, PoolSize: 64, MaxRetries: -1, DialerRetries: 1,
			DialTimeout: dialTimeout, ContextTimeoutEnabled: true,
		})
		c.t.Cleanup(func() { cl.Close() })
		out = append(out, cl)
	}
	return out
}

// hooked returns a backend on fresh clients straight to the nodes whose script calls run
// through hook (nil: no hook). The scripts are loaded first, so that every call is one
// EVALSHA and a hook runs once per call.
func (c *cluster) hooked(hook hookFn) *Backend {
	c.t.Helper()
	ctx := context.Background()
	var scripters []redis.Scripter
	for i, cl := range c.nodeClients(false) {
		for _, s := range []*redis.Script{acquireScript, stampScript, undoScript, releaseScript, renewScript} {
			if err := s.Load(ctx, cl).Err(); err != nil {
				c.t.Fatalf("load script on node %d: %v", i, err)
			}
		}
		if hook == nil {
			scripters = append(scripters, cl)
			continue
		}
		scripters = append(scripters, interceptor{Scripter: cl, node: i, hook: hook})
	}
	return New(scripters, Config{Prefix: c.prefix, NodeTimeout: 5 * time.Second})
}

// openWith opens one more backend through the proxies with cfg (its prefix set to the
// cluster's).
func (c *cluster) openWith(cfg Config) *Backend {
	c.t.Helper()
	addrs := make([]string, len(c.proxies))
	for i, p := range c.proxies {
		addrs[i] = p.Addr()
	}
	cfg.Prefix = c.prefix
	b, err := Open(context.Background(), addrs, cfg)
	if err != nil {
		c.t.Fatalf("Open: %v", err)
	}
	c.t.Cleanup(func() { b.Close() })
	return b
}

// rawHash reads key's lock hash on node i as it is, loose marks and attempt ids included.
func (c *cluster) rawHash(key string, i int) map[string]string {
	c.t.Helper()
	k := c.layout().Keys(key)[0]
	m, err := c.direct[i].HGetAll(context.Background(), k).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

// rawHashes is rawHash on every node, for failure messages.
func (c *cluster) rawHashes(key string) []map[string]string {
	out := make([]map[string]string, len(c.direct))
	for i := range c.direct {
		out[i] = c.rawHash(key, i)
	}
	return out
}

// waitConfirmed waits until key's hash on each of nodes carries a token (fence above 0).
func (c *cluster) waitConfirmed(key string, nodes ...int) {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, i := range nodes {
		for {
			f, _ := strconv.ParseInt(c.rawHash(key, i)["fence"], 10, 64)
			if f > 0 {
				break
			}
			if time.Now().After(deadline) {
				c.t.Errorf("node %d: %v never confirmed", i, c.rawHash(key, i))
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
}

// leftovers lists the keys under the cluster's prefix on every node other than the slot
// fencing counters.
func (c *cluster) leftovers() []string {
	c.t.Helper()
	ctx := context.Background()
	var out []string
	for i, d := range c.direct {
		iter := d.Scan(ctx, 0, c.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if k := iter.Val(); !strings.HasPrefix(k, c.prefix+":fence-bucket:") {
				out = append(out, "node "+strconv.Itoa(i)+": "+k+" "+fmtMap(c.rawHashAt(d, k)))
			}
		}
		if err := iter.Err(); err != nil {
			c.t.Fatal(err)
		}
	}
	return out
}

func (c *cluster) rawHashAt(d *redis.Client, k string) map[string]string {
	m, _ := d.HGetAll(context.Background(), k).Result()
	return m
}

func fmtMap(m map[string]string) string {
	s := "{"
	for _, f := range []string{"owner", "count", "fence", "att", "loose", "ttl"} {
		if v, ok := m[f]; ok {
			s += " " + f + "=" + v
		}
	}
	return s + " }"
}

func (c *cluster) layout() redislock.Layout { return redislock.NewLayout(c.prefix) }

// gate orders script calls of concurrent operations: fire marks a named step done, wait
// blocks until it is (or fails the test after a bound, so a wrong guess never hangs CI).
type gate struct {
	t  *testing.T
	mu sync.Mutex
	ch map[string]chan struct{}
}

func newGate(t *testing.T) *gate { return &gate{t: t, ch: map[string]chan struct{}{}} }

func (g *gate) get(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := g.ch[name]
	if ch == nil {
		ch = make(chan struct{})
		g.ch[name] = ch
	}
	return ch
}

func (g *gate) fire(name string) {
	ch := g.get(name)
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (g *gate) wait(name string) {
	select {
	case <-g.get(name):
	case <-time.After(10 * time.Second):
		g.t.Errorf("gate: %s never happened", name)
	}
}

// step names one script call of one operation on one node.
func step(op, script string, node int) string { return op + "/" + script + "/" + strconv.Itoa(node) }

// ordered returns a hook for operation op: before its script call on a node, it waits for
// the steps after[script/node] lists, and after the call it fires its own step.
func ordered(g *gate, op string, after map[string][]string) hookFn {
	return func(script string, node int, run func() *redis.Cmd) *redis.Cmd {
		for _, s := range after[script+"/"+strconv.Itoa(node)] {
			g.wait(s)
		}
		cmd := run()
		g.fire(step(op, script, node))
		return cmd
	}
}
