package event

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// syncBuffer is a log destination safe for the client's callback goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestReconnectLogSaysInProcess: when the embedded server drops the process's own
// connection, the reconnect line says it reconnected in-process, not to a TCP address it
// never dialled (nats.go reports nats://127.0.0.1:4222 for an in-process connection).
func TestReconnectLogSaysInProcess(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	b, err := Open(context.Background(), Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	id, err := b.nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.embedded.DisconnectClientByID(id); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "reconnected"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no reconnect line within 10s; log:\n%s", logs.String())
		}
	}
	line := logs.String()
	if !strings.Contains(line, "url=in-process") || strings.Contains(line, "nats://") {
		t.Fatalf("the reconnect line names a URL for an in-process connection:\n%s", line)
	}
}

// TestUnsignedOutsideWarns: on an outside NATS without a key the Bus says once, at start,
// that its events are unauthenticated; with a key it does not.
func TestUnsignedOutsideWarns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  []byte
		warn bool
	}{{nil, true}, {[]byte("0123456789abcdef"), false}} {
		var logs syncBuffer
		b, err := Open(context.Background(), Config{URL: testenv.NATSURL(), Key: tc.key, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		b.Close()
		if got := strings.Count(logs.String(), "not signed"); got != map[bool]int{true: 1, false: 0}[tc.warn] {
			t.Errorf("key %q: %d warnings about unsigned events, want warn=%v; log:\n%s", tc.key, got, tc.warn, logs.String())
		}
	}
}

// TestURLPasswordNeverLogged: a NATS URL that carries user:password (unreachable at start,
// so the Bus logs it while it keeps trying) shows up in the log with the password redacted.
func TestURLPasswordNeverLogged(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	b, err := Open(context.Background(), Config{URL: "nats://coord:s3cret-pass-word@" + addr, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if !strings.Contains(logs.String(), "not reachable") {
		t.Fatalf("no line about the unreachable NATS:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "s3cret-pass-word") {
		t.Fatalf("the log shows the URL's password:\n%s", logs.String())
	}
}

// TestWrongPasswordIsSaid: a Bus whose login is refused says so in the log, once, instead of
// passing for a NATS that is merely unreachable.
func TestWrongPasswordIsSaid(t *testing.T) {
	t.Parallel()
	srv, err := Open(context.Background(), Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	var logs syncBuffer
	b, err := Open(context.Background(), Config{URL: srv.ClientURL(), User: srv.Auth().Publisher.User, Password: "not-the-password",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(strings.ToLower(logs.String()), "authorization violation"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no line says the login was refused within 10s:\n%s", logs.String())
		}
	}
	time.Sleep(time.Second) // several more attempts
	if n := strings.Count(strings.ToLower(logs.String()), "authorization violation"); n != 1 {
		t.Fatalf("the refused login was logged %d times, want once:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "not-the-password") {
		t.Fatal("the log shows the password")
	}
}
