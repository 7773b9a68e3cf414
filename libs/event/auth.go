package event

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// SubjectRoot is the subject space of every coordkit event: outside subscribers of the
// embedded server may subscribe under it and nowhere else.
const SubjectRoot = "coordkit.>"

// Credential is one NATS user of the embedded server.
type Credential struct {
	User     string
	Password string
}

// Auth is who may connect to the embedded server's Listen address. Every client must name
// one of its users: Publisher, for other coord instances (every right, like the process's
// own in-process connection), or Subscriber, for everyone else (subscribe under
// SubjectRoot, publish nothing).
type Auth struct {
	Publisher  Credential
	Subscriber Credential
}

// GenerateAuth makes fresh users with random 32-byte passwords.
func GenerateAuth() (*Auth, error) {
	pub, err := randomSecret()
	if err != nil {
		return nil, err
	}
	sub, err := randomSecret()
	if err != nil {
		return nil, err
	}
	return &Auth{
		Publisher:  Credential{User: "coordkit-publisher", Password: pub},
		Subscriber: Credential{User: "coordkit-subscriber", Password: sub},
	}, nil
}

// randomSecret is 32 random bytes in unpadded URL-safe base64.
func randomSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("event: random secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// LoadAuth reads an auth file: one "role user password" line per role, publisher and
// subscriber, with blank lines and lines starting with # ignored.
func LoadAuth(path string) (*Auth, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("event: auth file: %w", err)
	}
	var a Auth
	var seen [2]bool
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("event: auth file %s line %d: want \"role user password\"", path, n)
		}
		c := Credential{User: f[1], Password: f[2]}
		switch f[0] {
		case "publisher":
			a.Publisher, seen[0] = c, true
		case "subscriber":
			a.Subscriber, seen[1] = c, true
		default:
			return nil, fmt.Errorf("event: auth file %s line %d: role %q is neither publisher nor subscriber", path, n, f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("event: auth file %s: %w", path, err)
	}
	switch {
	case !seen[0] || !seen[1]:
		return nil, fmt.Errorf("event: auth file %s: needs a publisher and a subscriber line", path)
	case a.Publisher.User == a.Subscriber.User:
		return nil, fmt.Errorf("event: auth file %s: publisher and subscriber must be different users", path)
	case len(a.Publisher.Password) < 16 || len(a.Subscriber.Password) < 16:
		return nil, fmt.Errorf("event: auth file %s: passwords must have at least 16 characters", path)
	}
	return &a, nil
}

// WriteAuthFile writes a to path, readable by its owner only, in LoadAuth's format. It
// refuses to overwrite an existing file.
func WriteAuthFile(path string, a *Auth) error {
	text := "# coordkit embedded NATS users: role user password\n" +
		"# publisher: other coord instances (--nats-user/--nats-password); subscriber: outside readers\n" +
		"publisher " + a.Publisher.User + " " + a.Publisher.Password + "\n" +
		"subscriber " + a.Subscriber.User + " " + a.Subscriber.Password + "\n"
	return writeSecretFile(path, []byte(text))
}

// writeSecretFile writes data to path, mode 0600, all at once: it is written to a temporary
// file beside path and then linked there, which fails (os.ErrExist) if path exists, so a
// reader never sees it half written and an existing file is never replaced.
func writeSecretFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) //nolint:errcheck // gone once linked; a leftover is only a temp file
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return fmt.Errorf("event: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("event: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("event: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("event: %w", err)
	}
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("event: %w", err)
	}
	return nil
}

// LoadOrCreateAuth reads the auth file at path, or generates one there (0600) when it does
// not exist yet; created says which.
func LoadOrCreateAuth(path string) (a *Auth, created bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if a, err = GenerateAuth(); err != nil {
			return nil, false, err
		}
		switch err := WriteAuthFile(path, a); {
		case err == nil:
			return a, true, nil
		case !errors.Is(err, os.ErrExist): // else another process just wrote it: read that
			return nil, false, err
		}
	}
	a, err = LoadAuth(path)
	return a, false, err
}

// Limits bounds what the embedded server's clients can make it hold. Zero fields take the
// Default* values.
type Limits struct {
	// MaxConns is how many connections the server accepts at once, this process's own
	// included.
	MaxConns int
	// MaxSubs is how many subscriptions one connection may hold; the process's own
	// connection carries one per Watch stream.
	MaxSubs int
	// MaxPayload is the largest message, in bytes (coordkit's events are under 1 KiB).
	MaxPayload int32
	// MaxPending is how many bytes the server queues for one connection that does not read
	// before it drops it as a slow consumer.
	MaxPending int64
	// WriteDeadline is how long a write to a connection may block before the server drops
	// it as a slow consumer.
	WriteDeadline time.Duration
	// ReaderConns is how many connections outside readers may hold at once (of MaxConns).
	ReaderConns int
	// ReaderSubs is how many subscriptions one reader's connection may hold.
	ReaderSubs int
}

// The embedded server's limits by default. A client that never reads costs the server at
// most DefaultMaxPending, and DefaultMaxConns of them at most their product: 64 MiB. Every
// connection but the process's own may be an outside reader's, so the product, not one
// client's share, is what a reader who stops reading can make the process hold. 1 MiB is
// over a thousand of coordkit's events of backlog for a reader that is merely slow.
const (
	DefaultMaxConns      = 64
	DefaultMaxSubs       = 1 << 16
	DefaultMaxPayload    = 64 << 10
	DefaultMaxPending    = 1 << 20
	DefaultWriteDeadline = 2 * time.Second
	// DefaultReaderConns is how many connections outside readers (the subscriber user) may
	// hold at once, fewer than DefaultMaxConns so that they can never lock out the coord
	// instances.
	DefaultReaderConns = 32
	// DefaultReaderSubs is how many subscriptions one reader's connection may hold. Each
	// costs the server its subject's bytes, up to 4 KiB: readers then hold at most 32 MiB.
	DefaultReaderSubs = 256
)

func (l Limits) apply(o *server.Options) {
	o.MaxConn = cmpOr(l.MaxConns, DefaultMaxConns)
	o.MaxSubs = cmpOr(l.MaxSubs, DefaultMaxSubs)
	o.MaxPayload = cmpOr(l.MaxPayload, DefaultMaxPayload)
	o.MaxPending = cmpOr(l.MaxPending, DefaultMaxPending)
	o.WriteDeadline = cmpOr(l.WriteDeadline, DefaultWriteDeadline)
}

func cmpOr[T int | int32 | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// The embedded server's accounts when it listens: the coord instances' (the process's own
// connection and the publisher), and the outside readers', which imports every event of the
// first and may hold only so many connections and subscriptions.
const (
	coordAccount   = "COORDKIT"
	readersAccount = "READERS"
)

// accountsConfig is a's users in their accounts, in nats-server's configuration language:
// the publisher with every right in coordAccount, the subscriber with subscribe under
// SubjectRoot only in readersAccount, under l's reader limits. Account limits can only be
// set from configuration.
func (a *Auth) accountsConfig(l Limits) string {
	q := strconv.Quote
	return `accounts {
  ` + coordAccount + ` {
    users = [ { user: ` + q(a.Publisher.User) + `, password: ` + q(a.Publisher.Password) + ` } ]
    exports = [ { stream: ` + q(SubjectRoot) + ` } ]
  }
  ` + readersAccount + ` {
    users = [ { user: ` + q(a.Subscriber.User) + `, password: ` + q(a.Subscriber.Password) + `,
      permissions: { publish: { deny: [">"] }, subscribe: { allow: [` + q(SubjectRoot) + `] } } } ]
    imports = [ { stream: { account: ` + coordAccount + `, subject: ` + q(SubjectRoot) + ` } } ]
    limits: { max_connections: ` + strconv.Itoa(cmpOr(l.ReaderConns, DefaultReaderConns)) +
		`, max_subscriptions: ` + strconv.Itoa(cmpOr(l.ReaderSubs, DefaultReaderSubs)) + ` }
  }
}
`
}
