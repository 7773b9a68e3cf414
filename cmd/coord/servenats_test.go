package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/coordkit/coordkit/libs/client/subject"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestServeNATSListenLocksDown: `coord serve --nats-listen` with TLS on generates its NATS
// users and events key into the data directory (0600, logged by path, never by content),
// serves NATS over TLS with the serve certificate, refuses clients without credentials, and
// lets the subscriber read but not publish. A second instance logs in as the publisher
// with the flags an operator would use, and its events arrive signed with the shared key.
func TestServeNATSListenLocksDown(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	dir := t.TempDir()
	natsAddr := freeAddr(t)
	_, log := serveEdge(t, dir, "--nats-listen", natsAddr, "--tls-cert", certs.CertFile, "--tls-key", certs.KeyFile)
	usersFile, keyFile := filepath.Join(dir, natsUsersFileName), filepath.Join(dir, eventsKeyFileName)
	for _, f := range []string{usersFile, keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatalf("serve --nats-listen did not generate %s: %v", f, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
		if !strings.Contains(log.String(), f) {
			t.Errorf("the log does not say where %s is", f)
		}
	}
	auth, err := event.LoadAuth(usersFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := event.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{auth.Publisher.Password, auth.Subscriber.Password, string(key)} {
		if strings.Contains(log.String(), secret) {
			t.Fatal("the log shows a NATS password or the events key")
		}
	}

	url := "nats://" + natsAddr
	if nc, err := nats.Connect(url, nats.MaxReconnects(0), nats.Secure(certs.ClientConfig())); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected to --nats-listen")
	}
	violations := make(chan error, 4)
	sub, err := nats.Connect(url, nats.MaxReconnects(0), nats.Secure(certs.ClientConfig()),
		nats.UserInfo(auth.Subscriber.User, auth.Subscriber.Password),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatalf("the subscriber could not connect over TLS with the serve certificate: %v", err)
	}
	defer sub.Close()
	events := make(chan *nats.Msg, 16)
	if _, err := sub.ChanSubscribe(subject.Lock(subject.Acquired, "sqlite", "servenats"), events); err != nil {
		t.Fatal(err)
	}
	if err := sub.Publish(subject.Lock(subject.Released, "sqlite", "servenats"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation for publish") {
			t.Fatalf("the subscriber's publish drew %v, want a permissions violation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber published without a permissions violation")
	}

	// Another instance, as deploy.md tells an operator to start it.
	second, log2 := serveEdge(t, t.TempDir(), "--nats-url", url, "--nats-user", auth.Publisher.User, "--nats-password", auth.Publisher.Password,
		"--nats-ca", certs.CAFile, "--events-key-file", keyFile)
	if strings.Contains(log2.String(), auth.Publisher.Password) {
		t.Fatal("the second instance logged its NATS password")
	}
	if code := acquireCode(second, "", "servenats"); code != 0 {
		t.Fatalf("Acquire on the second instance: %v", code)
	}
	select {
	case m := <-events:
		if m.Header.Get(event.SignatureHeader) == "" {
			t.Fatal("the second instance's acquired event is not signed")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no acquired event from the second instance; its log:\n%s", log2)
	}
}

// TestServeNATSFlagErrors: flags that cannot apply are refused before anything starts.
func TestServeNATSFlagErrors(t *testing.T) {
	t.Parallel()
	short := filepath.Join(t.TempDir(), "short.key")
	if err := os.WriteFile(short, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats-user", "u"}, "--nats-url"},
		{[]string{"--nats-creds", "x.creds"}, "--nats-url"},
		{[]string{"--nats-users-file", "users"}, "--nats-listen"},
		{[]string{"--nats-url", testenv.NATSURL(), "--nats-listen", "127.0.0.1:0"}, "--nats-listen"},
		{[]string{"--events-key-file", short}, "--events-key-file"},
		{[]string{"--nats-url", testenv.NATSURL(), "--nats-cert", "c.pem"}, "--nats-cert"},
		{[]string{"--nats-url", testenv.NATSURL(), "--nats-user", "u", "--nats-nkey", filepath.Join(t.TempDir(), "none")}, "nkey"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, append([]string{"serve", "--addr", freeAddr(t), "--data-dir", t.TempDir()}, tt.args...), io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("serve %v = %v, want an error naming %s", tt.args, err, tt.want)
		}
	}
}

// TestServeNATSSecretFilesReadable: a NATS users file or events key that every user of the
// machine may read is warned about, as the tokens file is; the 0600 ones are not.
func TestServeNATSSecretFilesReadable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		mode os.FileMode
		want bool
	}{
		{"private", 0o600, false},
		{"world-readable", 0o644, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			auth, err := event.GenerateAuth()
			if err != nil {
				t.Fatal(err)
			}
			users, key := filepath.Join(dir, "users"), filepath.Join(dir, "events.key")
			if err := event.WriteAuthFile(users, auth); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{users, key} {
				if err := os.Chmod(f, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			_, log := serveEdge(t, t.TempDir(), "--nats-listen", freeAddr(t), "--nats-users-file", users, "--events-key-file", key)
			for _, flag := range []string{"--nats-users-file", "--events-key-file"} {
				if got := strings.Contains(log.String(), flag+" file is readable by every user"); got != tt.want {
					t.Errorf("mode %v: warned about %s: %v, want %v; log:\n%s", tt.mode, flag, got, tt.want, log)
				}
			}
		})
	}
}
