package redisconf_test

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
)

// replyDropper is a TCP proxy that, once armed, forwards the next request holding EVAL to the
// server, lets it run, and then closes the connection before the reply comes back: a reply
// lost to the network after the script ran.
type replyDropper struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
}

func newReplyDropper(t *testing.T, target string) *replyDropper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	d := &replyDropper{ln: ln, target: target}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go d.serve(in)
		}
	}()
	return d
}

func (d *replyDropper) port() int { return d.ln.Addr().(*net.TCPAddr).Port }

func (d *replyDropper) serve(in net.Conn) {
	out, err := net.Dial("tcp", d.target)
	if err != nil {
		in.Close()
		return
	}
	var dropping atomic.Bool       // the reply of this connection's EVAL must not pass
	replied := make(chan struct{}) // closed when that reply arrived: the script has run
	go func() {
		buf := make([]byte, 64<<10)
		signaled := false
		for {
			n, err := out.Read(buf)
			switch {
			case n > 0 && dropping.Load():
				if !signaled {
					signaled = true
					close(replied)
				}
			case n > 0:
				in.Write(buf[:n]) //nolint:errcheck // a failed write ends the copy below
			}
			if err != nil {
				in.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			drop := bytes.Contains(bytes.ToUpper(buf[:n]), []byte("EVAL")) && d.armed.CompareAndSwap(true, false)
			dropping.Store(drop)
			out.Write(buf[:n]) //nolint:errcheck // a failed write ends the copy below
			if drop {
				select { // the script runs; its reply is dropped
				case <-replied:
				case <-time.After(10 * time.Second):
				}
				in.Close()
				out.Close()
				return
			}
		}
		if err != nil {
			out.Close()
			return
		}
	}
}

// incrScript stands for an acquire: running it twice is visible.
const incrScript = "return redis.call('INCR', KEYS[1])"

// TestClusterScriptRunsOnce attacks the retry settings: the connection of a Cluster client
// breaks after a script reached the node, so the script ran but its reply is lost. go-redis's
// cluster client retries such a command up to MaxRedirects times whatever MaxRetries says
// (the control below shows it running the script twice); the client of a redis+cluster://
// URL must run it exactly once and report the failure.
func TestClusterScriptRunsOnce(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 1})
	node := cluster.Nodes[0]
	drop := newReplyDropper(t, node.Addr())
	ctx := context.Background()
	direct := node.Client(t)
	// The node tells clients to reach it through the proxy.
	if err := direct.ConfigSet(ctx, "cluster-announce-port", strconv.Itoa(drop.port())).Err(); err != nil {
		t.Fatal(err)
	}
	proxied := "127.0.0.1:" + strconv.Itoa(drop.port())

	run := func(rdb redis.UniversalClient, key string) (ran int64, err error) {
		t.Helper()
		if err := rdb.Ping(ctx).Err(); err != nil { // loads the slot map, no EVAL
			t.Fatalf("PING: %v", err)
		}
		drop.armed.Store(true)
		_, err = rdb.Eval(ctx, incrScript, []string{key}).Result()
		ran, gerr := direct.Get(ctx, key).Int64()
		if gerr != nil {
			t.Fatalf("GET %s: %v", key, gerr)
		}
		return ran, err
	}

	control := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{proxied}, MaxRetries: -1})
	defer control.Close()
	if ran, err := run(control, "control"); ran != 2 || err != nil {
		t.Logf("control (go-redis defaults, MaxRetries -1): script ran %d times, err %v", ran, err)
		if ran < 2 {
			t.Fatalf("the control ran the script %d times: the attack does not reproduce the retry it guards against", ran)
		}
	}

	o, err := redisconf.Parse("redis+cluster://" + proxied)
	if err != nil {
		t.Fatal(err)
	}
	rdb := o.NewClient()
	defer rdb.Close()
	ran, err := run(rdb, "guarded")
	if err == nil {
		t.Fatalf("the lost reply was reported as success")
	}
	if ran != 1 {
		t.Fatalf("the script ran %d times after its reply was lost, want once (err %v)", ran, err)
	}
}
