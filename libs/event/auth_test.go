package event_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
)

// rawConnect connects a plain nats.go client to url as an outsider would, recording the
// asynchronous errors (permission violations) the server sends it.
func rawConnect(t *testing.T, url string, errs chan<- error, opts ...nats.Option) (*nats.Conn, error) {
	t.Helper()
	opts = append(opts, nats.MaxReconnects(0), nats.Timeout(5*time.Second), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	nc, err := nats.Connect(url, opts...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

// TestListenRequiresCredentials attacks the embedded server's listening port: a client
// without credentials, or with a wrong password, cannot connect; the subscriber may read
// coordkit's events but publish nothing (not even on coordkit's own subjects) and subscribe
// nowhere else; the publisher, another coord instance, may publish.
func TestListenRequiresCredentials(t *testing.T) {
	t.Parallel()
	srv := open(t, event.Config{Listen: "127.0.0.1:0"})
	auth := srv.Auth()
	if auth == nil || auth.Subscriber.Password == "" || auth.Publisher.Password == auth.Subscriber.Password {
		t.Fatalf("Auth() = %+v, want generated publisher and subscriber users", auth)
	}
	errs := make(chan error, 16)
	if _, err := rawConnect(t, srv.ClientURL(), errs); err == nil {
		t.Fatal("a client without credentials connected to the listening embedded server")
	}
	if _, err := rawConnect(t, srv.ClientURL(), errs, nats.UserInfo(auth.Subscriber.User, "guess")); err == nil {
		t.Fatal("a client with a wrong password connected")
	}

	own := receive(t, srv, "coordkit.test.>")
	sub, err := rawConnect(t, srv.ClientURL(), errs, nats.UserInfo(auth.Subscriber.User, auth.Subscriber.Password))
	if err != nil {
		t.Fatalf("the subscriber could not connect: %v", err)
	}
	seen := make(chan *nats.Msg, 16)
	if _, err := sub.ChanSubscribe("coordkit.test.>", seen); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	ev := &lockv1.LockEvent{Key: "k", FencingToken: 3}
	if err := srv.Publish("coordkit.test.genuine", ev); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-seen:
		if m.Subject != "coordkit.test.genuine" {
			t.Fatalf("the subscriber got %q, want coordkit.test.genuine", m.Subject)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber did not get coordkit's event")
	}
	wantEvent(t, own, ev)

	// Publishing, anywhere, is a permission violation and reaches nobody.
	for _, subj := range []string{"coordkit.test.forged", "coordkit.lock.v1.released.sqlite.k", "elsewhere"} {
		if err := sub.Publish(subj, []byte(`{"key":"k","fencingToken":"4"}`)); err != nil {
			t.Fatal(err)
		}
		wantViolation(t, errs, "publish", subj)
	}
	if _, err := sub.SubscribeSync("elsewhere.>"); err != nil {
		t.Fatal(err)
	}
	wantViolation(t, errs, "subscription", "elsewhere.>")
	if err := srv.Publish("coordkit.test.after", ev); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-own:
		if got.GetFencingToken() != 3 {
			t.Fatalf("the server's own subscriber got %v: a forged event went through", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after the forgeries")
	}

	// The publisher is another coord instance: what it publishes arrives.
	pub := open(t, peer(srv))
	if err := pub.Publish("coordkit.test.peer", &lockv1.LockEvent{Key: "peer"}); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, own, &lockv1.LockEvent{Key: "peer"})
}

// wantViolation waits for the server's permission violation for kind ("publish" or
// "subscription") on subj.
func wantViolation(t *testing.T, errs <-chan error, kind, subj string) {
	t.Helper()
	for deadline := time.After(10 * time.Second); ; {
		select {
		case err := <-errs:
			msg := strings.ToLower(err.Error())
			if strings.Contains(msg, "permissions violation for "+kind) && strings.Contains(err.Error(), `"`+subj+`"`) {
				return
			}
		case <-deadline:
			t.Fatalf("no permissions violation for %s to %q within 10s", kind, subj)
		}
	}
}

// TestAuthFile: a users file round-trips, is written 0600 and never overwritten, and a
// file that could let the subscriber pass for the publisher is refused.
func TestAuthFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "nats-users")
	a, created, err := event.LoadOrCreateAuth(path)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateAuth = %v, %v, want a new file", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("users file mode %v, want 0600", fi.Mode().Perm())
	}
	b, created, err := event.LoadOrCreateAuth(path)
	if err != nil || created || *b != *a {
		t.Fatalf("second LoadOrCreateAuth = %+v, %v, %v, want the same users read back", b, created, err)
	}
	for name, text := range map[string]string{
		"same user":      "publisher u 0123456789abcdef\nsubscriber u 0123456789abcdefg\n",
		"short password": "publisher p short\nsubscriber s 0123456789abcdef\n",
		"missing role":   "publisher p 0123456789abcdef\n",
		"unknown role":   "publisher p 0123456789abcdef\nsubscriber s 0123456789abcdef\nadmin a 0123456789abcdef\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := event.LoadAuth(p); err == nil {
			t.Errorf("LoadAuth accepted a file with %s", name)
		}
	}
	// Instances starting together on one data dir all read the same file, never a half one.
	shared := filepath.Join(dir, "shared-users")
	got := make([]*event.Auth, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			a, _, err := event.LoadOrCreateAuth(shared)
			if err != nil {
				t.Errorf("concurrent LoadOrCreateAuth: %v", err)
				return
			}
			got[i] = a
		})
	}
	wg.Wait()
	for _, a := range got {
		if a == nil || *a != *got[0] {
			t.Fatalf("concurrent LoadOrCreateAuth returned different users: %+v vs %+v", a, got[0])
		}
	}
	key, created, err := event.LoadOrCreateKeyFile(filepath.Join(dir, "events.key"))
	if err != nil || !created || len(key) < event.MinKeyLen {
		t.Fatalf("LoadOrCreateKeyFile = %q, %v, %v", key, created, err)
	}
	again, created, err := event.LoadOrCreateKeyFile(filepath.Join(dir, "events.key"))
	if err != nil || created || string(again) != string(key) {
		t.Fatalf("second LoadOrCreateKeyFile = %q, %v, %v, want the same key", again, created, err)
	}
}

// TestListenTLS: with ListenTLS the listening port speaks TLS only, with the given
// certificate, while the process's own in-process connection keeps working.
func TestListenTLS(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	st, err := server.LoadTLS(certs.CertFile, certs.KeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := open(t, event.Config{Listen: "127.0.0.1:0", ListenTLS: st.Config()})
	own := receive(t, srv, "coordkit.tls.>")
	user := nats.UserInfo(srv.Auth().Subscriber.User, srv.Auth().Subscriber.Password)
	errs := make(chan error, 16)
	if nc, err := rawConnect(t, srv.ClientURL(), errs, user); err == nil && !nc.TLSRequired() {
		t.Fatal("a plain-text client connected to the TLS port")
	}
	nc, err := rawConnect(t, srv.ClientURL(), errs, user, nats.Secure(certs.ClientConfig()))
	if err != nil {
		t.Fatalf("a TLS client trusting the serve CA could not connect: %v", err)
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Fatalf("the connection is not TLS: %v", err)
	}
	if _, err := rawConnect(t, srv.ClientURL(), errs, user, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12})); err == nil {
		t.Fatal("a TLS client that trusts only the system's roots connected")
	}
	peerTLS := peer(srv)
	peerTLS.TLS = certs.ClientConfig()
	pub := open(t, peerTLS)
	if err := pub.Publish("coordkit.tls.peer", &lockv1.LockEvent{Key: "tls"}); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, own, &lockv1.LockEvent{Key: "tls"})
}

// TestSlowSubscribersBounded: outside subscribers on every connection the server allows that
// never read while 100 MB of events are published cost the embedded server at most their
// pending limit each, under 100 MiB in all: they are cut off as slow consumers instead of
// growing the process without bound. It measures the whole process's heap, so it runs alone
// (not parallel: no other test's allocations count) and with frequent collections (the
// published messages' garbage does not count either).
func TestSlowSubscribersBounded(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	srv := open(t, event.Config{Listen: "127.0.0.1:0"})
	addr := strings.TrimPrefix(srv.ClientURL(), "nats://")
	connect, _ := json.Marshal(map[string]any{"user": srv.Auth().Subscriber.User, "pass": srv.Auth().Subscriber.Password, "verbose": false, "pedantic": false})
	// Every connection outside readers may hold.
	const stalled = event.DefaultReaderConns
	conns := make([]net.Conn, stalled)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "CONNECT %s\r\nSUB coordkit.flood.> %d\r\nPING\r\n", connect, i+1); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		for { // INFO, then PONG once the subscription is in: from now on it never reads
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stalled subscriber %d: %v", i, err)
			}
			if strings.HasPrefix(line, "-ERR") {
				t.Fatalf("stalled subscriber %d: %s", i, line)
			}
			if strings.HasPrefix(line, "PONG") {
				break
			}
		}
		conns[i] = c
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	})
	payload := []byte(`{"key":"` + strings.Repeat("x", 60<<10) + `"}`)
	const total = 100 << 20
	for sent := 0; sent < total; sent += len(payload) {
		if err := srv.PublishJSON("coordkit.flood.x", payload); err != nil {
			t.Fatal(err)
		}
		if sent%(8<<20) < len(payload) {
			if err := srv.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := srv.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	// Before readers had a connection limit of their own and the pending limit was 1 MiB,
	// 8 MiB each: 60 stalled subscribers took a coord process from 87 MB to 788 MB.
	const limit = 100 << 20
	if grew > limit {
		t.Fatalf("%d subscribers that never read grew the heap by %d MiB while 100 MiB were published, want under %d MiB", stalled, grew>>20, limit>>20)
	}
	// Each was cut off: reading now ends in EOF or a reset once what the kernel buffered
	// is drained, long before 100 MiB.
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		var n int64
		buf := make([]byte, 1<<20)
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("stalled subscriber %d still connected after reading %d MiB", i, n>>20)
				}
				break
			}
		}
		if n >= total {
			t.Fatalf("stalled subscriber %d got all %d MiB: nothing bounded it", i, n>>20)
		}
	}
	t.Logf("heap grew by %d MiB at most", grew>>20)
}

// TestReadersBounded: outside readers may not make the embedded server hold what they like.
// Subscriptions cost the server their subject's bytes each: two readers with 65,536
// subscriptions of 1,000-byte subjects grew a coord process by 407 MB. A reader's
// connection may hold at most DefaultReaderSubs subscriptions, and readers at most
// DefaultReaderConns connections in all, so that they can never take the slots of the coord
// instances: the publisher still connects, and events still reach every reader.
func TestReadersBounded(t *testing.T) {
	t.Parallel()
	srv := open(t, event.Config{Listen: "127.0.0.1:0"})
	url, auth := srv.ClientURL(), srv.Auth()
	sub := nats.UserInfo(auth.Subscriber.User, auth.Subscriber.Password)

	errs := make(chan error, 16)
	nc, err := rawConnect(t, url, errs, sub)
	if err != nil {
		t.Fatal(err)
	}
	for i := range event.DefaultReaderSubs + 1 {
		if _, err := nc.SubscribeSync(fmt.Sprintf("coordkit.bounded.%s.%d", strings.Repeat("x", 1000), i)); err != nil {
			t.Fatal(err)
		}
	}
	_ = nc.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions") {
			t.Fatalf("subscription %d of one reader: %v, want maximum subscriptions exceeded", event.DefaultReaderSubs+1, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a reader holds %d subscriptions, want at most %d", event.DefaultReaderSubs+1, event.DefaultReaderSubs)
	}
	nc.Close()

	var readers []*nats.Conn
	for start := time.Now(); len(readers) < event.DefaultReaderConns; {
		nc, err := rawConnect(t, url, make(chan error, 1), sub)
		if err != nil {
			if time.Since(start) > 10*time.Second { // the closed one above may still count a moment
				t.Fatalf("reader %d: %v", len(readers)+1, err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		readers = append(readers, nc)
	}
	if nc, err := rawConnect(t, url, make(chan error, 1), sub); err == nil {
		nc.Close()
		t.Fatalf("reader %d connected, want at most %d", event.DefaultReaderConns+1, event.DefaultReaderConns)
	}
	pub, err := rawConnect(t, url, make(chan error, 1), nats.UserInfo(auth.Publisher.User, auth.Publisher.Password))
	if err != nil {
		t.Fatalf("with every reader slot taken, the publisher cannot connect: %v", err)
	}
	s, err := readers[len(readers)-1].SubscribeSync("coordkit.bounded.news")
	if err != nil {
		t.Fatal(err)
	}
	if err := readers[len(readers)-1].Flush(); err != nil {
		t.Fatal(err)
	}
	for _, from := range []func(string, []byte) error{pub.Publish, srv.PublishJSON} {
		if err := from("coordkit.bounded.news", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.NextMsg(10 * time.Second); err != nil {
			t.Fatalf("a reader got no event: %v", err)
		}
	}
}
