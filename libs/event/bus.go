// Package event is coordkit's one NATS connection per process: services publish what changed
// (a lock released, a task available) and subscribe to what others published, so waiters are
// pushed awake instead of polling. With no NATS URL it runs an embedded nats-server inside the
// process, so the zero-setup default has push wake-up too.
//
// NATS is inside coordkit's trust boundary. The embedded server, when it listens, takes only
// clients that log in (Auth): coord instances, who may publish, and outside readers, who may
// only subscribe under SubjectRoot; its Limits bound what a client that never reads can make
// it hold. With a Key every message is signed (HMAC-SHA256, SignatureHeader) over its
// subject, payload, sender, number and send time, and every subscription drops what is not
// signed with it, what was sent more than a SignatureWindow from its clock, and every copy
// of a message it has already delivered: nobody without the key can forge an event that
// reaches a waiter or a watcher, nor make one arrive twice.
//
// NATS core delivery is at most once: an event can be lost (a disconnect, a restart). Every
// user of this package must treat an event as a hint that shortens a wait it bounds by other
// means, never as the only way a wait ends.
package event

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Config configures Open.
type Config struct {
	// URL is a NATS server URL, or a comma-separated list of a cluster's; empty runs an
	// embedded nats-server in this process.
	URL string
	// Listen, with the embedded server only, is a host:port on which it also accepts outside
	// clients (subscribers in other processes); port 0 picks a free one (see ClientURL);
	// empty accepts none.
	Listen string
	// Name names the connection in the NATS server's monitoring; default "coordkit".
	Name string
	// Logger receives one line when NATS becomes unreachable and one when it is back;
	// default slog.Default().
	Logger *slog.Logger
	// Registerer receives the coordkit_events_* metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer

	// Auth, with Listen, is who may connect there: every client must log in as one of its
	// users. Nil generates fresh ones (see Bus.Auth). The in-process connection needs none.
	Auth *Auth
	// ListenTLS, with Listen, makes clients there speak TLS with this server configuration.
	ListenTLS *tls.Config
	// Limits bound what the embedded server's clients can make it hold.
	Limits Limits

	// User and Password, CredsFile (a .creds file: a user JWT and its nkey seed) or
	// NKeyFile (an nkey seed file) log in to the NATS at URL; at most one kind. A URL may
	// also carry user:password itself. They are never logged.
	User, Password string
	CredsFile      string
	NKeyFile       string
	// TLS configures the client side of TLS to the NATS at URL (its CAs, a client
	// certificate); nil uses TLS only when the server asks for it, with the system's roots.
	TLS *tls.Config

	// Key, when set, signs every published message (SignatureHeader) and makes every
	// subscription of the Bus drop each message not signed with it, counted in
	// coordkit_events_rejected_total. Every instance that shares a NATS needs the same key.
	Key []byte
	// SignatureWindow, with Key, is how far a message's signed send time may be from this
	// process's clock before its subscriptions drop it as stale; zero is
	// DefaultSignatureWindow. The clocks of the instances sharing a NATS must agree within it.
	SignatureWindow time.Duration
}

// Bus is one process's NATS connection. It is safe for concurrent use.
type Bus struct {
	nc       *nats.Conn
	embedded *server.Server  // nil when connected to an outside NATS
	account  *server.Account // the embedded server's, whose subscriptions Wanted reads
	private  bool            // embedded with no Listen address: this Bus is its only client
	log      *slog.Logger
	metrics  *metrics
	key      []byte        // signs and verifies every message; nil: unsigned
	window   time.Duration // a signed message's send time may be this far from the clock
	sender   string        // this Bus's random id in its signatures
	pubMu    sync.Mutex    // numbers and sends signed messages in one order
	seq      uint64        // signed messages sent, under pubMu
	senders  atomic.Int64  // senders remembered by all subscriptions' replay caches
	auth     *Auth         // the embedded server's users, when it listens
	rejected sync.Map      // reason -> struct{}: a message rejected for it was logged
	failure  atomic.Value  // string: the connect failure last logged, until connected

	// settling counts subscriptions the embedded server may not have yet, and settled is
	// the reconnect count (nats.Conn's Statistics.Reconnects) at which it was last known to
	// have all of them again (resent after a reconnect): until then Wanted cannot trust it.
	settling atomic.Int64
	settled  atomic.Uint64

	up       atomic.Bool // the state OnChange listeners were last told
	mu       sync.Mutex
	onChange []func(connected bool)
	others   map[string][]*otherSub // SubscribeOthers's subscribers per subject, when private
}

// otherSub is one SubscribeOthers subscriber of a private Bus.
type otherSub struct {
	fn    func(subject string, data []byte)
	unsub func() error // its subscription; nil while it is the subject's only subscriber
}

// Open connects to cfg.URL, or starts the embedded server when it is empty. An outside NATS
// that is unreachable at start is not an error: the Bus keeps trying in the background, says
// so in the log and in coordkit_events_connected, and its users fall back to polling until it
// connects.
func Open(ctx context.Context, cfg Config) (*Bus, error) {
	b := &Bus{log: cfg.Logger, metrics: newMetrics(cfg.Registerer), key: cfg.Key}
	if b.log == nil {
		b.log = slog.Default()
	}
	if len(b.key) > 0 && len(b.key) < MinKeyLen {
		return nil, fmt.Errorf("event: Key has %d bytes, want at least %d", len(b.key), MinKeyLen)
	}
	if b.window = cfg.SignatureWindow; b.window == 0 {
		b.window = DefaultSignatureWindow
	} else if b.window < time.Second {
		return nil, fmt.Errorf("event: SignatureWindow %v, want at least 1s", b.window)
	}
	if len(b.key) > 0 {
		var err error
		if b.sender, err = newSenderID(); err != nil {
			return nil, err
		}
	}
	name := cfg.Name
	if name == "" {
		name = "coordkit"
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(b.disconnected),
		nats.ReconnectHandler(b.reconnected),
		nats.ConnectHandler(b.connected),
		nats.ErrorHandler(b.asyncError),
		nats.ReconnectErrHandler(b.connectFailed),
	}
	url := cfg.URL
	switch {
	case url == "":
		if cfg.User != "" || cfg.Password != "" || cfg.CredsFile != "" || cfg.NKeyFile != "" || cfg.TLS != nil {
			return nil, errors.New("event: credentials and TLS options are for a NATS URL; the embedded server needs none")
		}
		if cfg.Listen != "" && cfg.Auth == nil {
			a, err := GenerateAuth()
			if err != nil {
				return nil, err
			}
			cfg.Auth = a
		}
		ns, err := startEmbedded(cfg)
		if err != nil {
			return nil, err
		}
		b.embedded, b.account, b.private = ns, ns.GlobalAccount(), cfg.Listen == ""
		if !b.private {
			if b.account, err = ns.LookupAccount(coordAccount); err != nil {
				ns.Shutdown()
				return nil, fmt.Errorf("event: embedded NATS: %w", err)
			}
		}
		opts = append(opts, nats.InProcessServer(ns))
		if cfg.Listen != "" {
			b.auth = cfg.Auth
			opts = append(opts, nats.UserInfo(cfg.Auth.Publisher.User, cfg.Auth.Publisher.Password))
		}
	case cfg.Listen != "" || cfg.Auth != nil || cfg.ListenTLS != nil:
		return nil, errors.New("event: Listen, Auth and ListenTLS are for the embedded server; they cannot be set with a NATS URL")
	default:
		auth, err := clientAuth(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, auth...)
		opts = append(opts, nats.RetryOnFailedConnect(true))
		if len(b.key) == 0 {
			b.log.WarnContext(ctx, "events: no events key, so events are not signed: anyone who may publish on this NATS can forge them; its permissions are the only defence (see docs/security.md)")
		}
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		b.shutdownEmbedded()
		return nil, fmt.Errorf("event: connect to NATS %q: %w", redactURL(url), err)
	}
	b.nc = nc
	if nc.IsConnected() {
		b.up.Store(true)
		b.metrics.connected.Set(1)
	} else {
		b.log.WarnContext(ctx, "events: NATS is not reachable yet; waiters poll until it is", "url", redactURL(url))
	}
	return b, nil
}

// clientAuth is the nats.go options that log in to an outside NATS as cfg says.
func clientAuth(cfg Config) ([]nats.Option, error) {
	var opts []nats.Option
	kinds := 0
	if cfg.User != "" || cfg.Password != "" {
		kinds++
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.CredsFile != "" {
		kinds++
		if _, err := os.Stat(cfg.CredsFile); err != nil {
			return nil, fmt.Errorf("event: creds file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeyFile != "" {
		kinds++
		o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("event: nkey seed file: %w", err)
		}
		opts = append(opts, o)
	}
	if kinds > 1 {
		return nil, errors.New("event: give one of user/password, a creds file or an nkey seed file")
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS))
	}
	return opts, nil
}

// redactURL hides the passwords of a comma-separated list of NATS URLs.
func redactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// startEmbedded runs a nats-server inside this process: in-process connections only, or
// also TCP clients on cfg.Listen, who must log in as one of cfg.Auth's users.
func startEmbedded(cfg Config) (*server.Server, error) {
	opts := &server.Options{}
	if cfg.Listen != "" {
		if err := opts.ProcessConfigString(cfg.Auth.accountsConfig(cfg.Limits)); err != nil {
			return nil, fmt.Errorf("event: embedded NATS users: %w", err)
		}
	}
	opts.ServerName, opts.DontListen, opts.NoSigs, opts.NoLog = "coordkit-embedded", true, true, true
	cfg.Limits.apply(opts)
	if listen := cfg.Listen; listen != "" {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("event: listen address %q: %w", listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("event: listen address %q: bad port", listen)
		}
		if p == 0 {
			p = server.RANDOM_PORT // nats-server reads 0 as its default, 4222
		}
		opts.DontListen, opts.Host, opts.Port = false, host, p
		if cfg.ListenTLS != nil {
			opts.TLSConfig, opts.TLSTimeout = cfg.ListenTLS, 2
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("event: embedded NATS: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("event: embedded NATS did not start (listen %q)", cfg.Listen)
	}
	return ns, nil
}

// Auth is who may connect to the embedded server's Listen address (generated when Open
// was given none), or nil when nobody outside may.
func (b *Bus) Auth() *Auth { return b.auth }

// Signed says whether the Bus signs what it publishes and drops what is not signed.
func (b *Bus) Signed() bool { return len(b.key) > 0 }

// ClientURL is where outside clients reach the embedded server, or "" when it accepts none
// or the Bus is connected to an outside NATS.
func (b *Bus) ClientURL() string {
	if b.embedded == nil || b.embedded.Addr() == nil {
		return ""
	}
	return b.embedded.ClientURL()
}

// Publish sends m, in its protobuf JSON form, on subject. It does not wait for delivery;
// while NATS is unreachable the message is buffered (up to the client's reconnect buffer)
// and sent when it is back, else dropped with an error.
func (b *Bus) Publish(subject string, m proto.Message) error {
	if !b.Wanted(subject) {
		return nil
	}
	data, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Errorf("event: encode %s: %w", subject, err)
	}
	return b.PublishJSON(subject, data)
}

// PublishJSON sends data, a message already in its protobuf JSON form, on subject: Publish
// for the hot paths that encode their events without reflection. It does not ask Wanted:
// such a caller asks before it encodes (a message nobody wants is dropped by the server).
func (b *Bus) PublishJSON(subject string, data []byte) error {
	var err error
	if len(b.key) > 0 {
		err = b.publishSigned(subject, data)
	} else {
		err = b.nc.Publish(subject, data)
	}
	if err != nil {
		b.metrics.publishFailures.Inc()
		return fmt.Errorf("event: publish %s: %w", subject, err)
	}
	return nil
}

// publishSigned numbers, signs and sends one message. The lock keeps the numbers in the order
// the connection sends them, so each subscription sees a sender's numbers rising.
func (b *Bus) publishSigned(subject string, data []byte) error {
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	b.seq++
	sig := sign(b.key, b.sender, b.seq, time.Now().UnixMilli(), subject, data)
	return b.nc.PublishMsg(&nats.Msg{Subject: subject, Data: data, Header: nats.Header{SignatureHeader: {sig}}})
}

// Wanted says whether a message on subject can reach anyone. It is false only on the
// embedded server when no subscription, of this process or of an outside client, matches
// subject: the server would drop the message, so Publish skips the work of encoding and
// sending it. It reads the server's own list, so it is true whenever that list may lack
// this Bus's subscriptions: while a Subscribe is not yet confirmed by a round trip, and
// from a disconnect until the subscriptions resent on reconnecting are confirmed (a message
// is then buffered or sent, as without the check, and its subscription, ahead of it on the
// connection, gets it). An outside NATS's subscribers cannot be seen from here, so there it
// is always true.
func (b *Bus) Wanted(subject string) bool {
	switch {
	case b.account == nil, b.settling.Load() > 0, !b.nc.IsConnected():
		return true
	case b.nc.Stats().Reconnects != b.settled.Load():
		return true
	}
	return b.account.SubscriptionInterest(subject)
}

// settle confirms, with a round trip, that the embedded server has every subscription sent
// so far, and then runs done with the round trip's error (nil: confirmed). A connection that
// drops meanwhile leaves it to the reconnect's own settle.
func (b *Bus) settle(done func(err error)) {
	go func() { done(b.nc.FlushTimeout(10 * time.Second)) }()
}

// Subscribe calls fn for every message on subject (wildcards allowed), one at a time in the
// order they arrive. fn must be quick: it runs on the subscription's delivery goroutine. The
// returned function ends the subscription. With a Key, fn sees only messages signed with it,
// sent within the SignatureWindow of now, and each of them once.
func (b *Bus) Subscribe(subject string, fn func(subject string, data []byte)) (unsubscribe func() error, err error) {
	if b.account != nil {
		b.settling.Add(1) // until the server has it (see Wanted)
	}
	var replays *replayCache
	if len(b.key) > 0 {
		replays = newReplayCache(b.window, &b.senders)
	}
	sub, err := b.nc.Subscribe(subject, func(m *nats.Msg) {
		if replays != nil {
			s, why := verified(b.key, m)
			if why == "" {
				why = replays.admit(time.Now(), s)
			}
			if why != "" {
				b.reject(m.Subject, why)
				return
			}
		}
		fn(m.Subject, m.Data)
	})
	if b.account != nil {
		b.settle(func(error) { b.settling.Add(-1) })
	}
	if err != nil {
		return nil, fmt.Errorf("event: subscribe %s: %w", subject, err)
	}
	// Wake-ups are tiny and handled in microseconds; a deep buffer rides out bursts rather
	// than drop them as a slow consumer.
	if err := sub.SetPendingLimits(1<<20, 64<<20); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("event: subscribe %s: %w", subject, err)
	}
	if replays == nil {
		return sub.Unsubscribe, nil
	}
	return func() error {
		err := sub.Unsubscribe()
		replays.forget()
		return err
	}, nil
}

// SubscribeOthers is Subscribe for a subscriber that already handles what it publishes
// itself without NATS (the lock service wakes its own waiters directly) and needs only what
// others publish on subject. On the embedded server with no Listen address the only others
// are the other SubscribeOthers subscribers of subject on this Bus (several services of one
// process sharing it): the first one subscribes to nothing, so its own messages are neither
// delivered back to it nor, while nothing else listens, published at all (see Wanted); a
// second one makes them all subscriptions. Elsewhere it is Subscribe. Either way fn may
// also see its own messages.
func (b *Bus) SubscribeOthers(subject string, fn func(subject string, data []byte)) (unsubscribe func() error, err error) {
	if !b.private {
		return b.Subscribe(subject, fn)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	o := &otherSub{fn: fn}
	line := append(b.others[subject], o)
	if len(line) > 1 {
		for _, x := range line {
			if x.unsub == nil {
				if x.unsub, err = b.Subscribe(subject, x.fn); err != nil {
					return nil, err
				}
			}
		}
	}
	if b.others == nil {
		b.others = map[string][]*otherSub{}
	}
	b.others[subject] = line
	return func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.others[subject] = slices.DeleteFunc(b.others[subject], func(x *otherSub) bool { return x == o })
		if len(b.others[subject]) == 0 {
			delete(b.others, subject)
		}
		if o.unsub != nil {
			return o.unsub()
		}
		return nil
	}, nil
}

// Flush waits until the server has processed everything published so far (or ctx ends, or
// 10s pass when ctx has no deadline): a subscription made before Flush is in force when it
// returns.
func (b *Bus) Flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return b.nc.FlushWithContext(ctx)
}

// Connected says whether NATS can be reached now. While it cannot, events are not delivered
// and waiters must poll.
func (b *Bus) Connected() bool { return b.nc.IsConnected() }

// OnChange registers fn to run each time the connection goes down (connected false) or is
// (re)established (true). While it is down events are lost, so users poll; when it is back
// they re-check what they wait for. fn runs on the client's callback goroutine: keep it short.
func (b *Bus) OnChange(fn func(connected bool)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onChange = append(b.onChange, fn)
}

func (b *Bus) changed(connected bool) {
	if b.up.Swap(connected) == connected {
		return // the listeners know
	}
	b.mu.Lock()
	fns := append([]func(bool){}, b.onChange...)
	b.mu.Unlock()
	for _, fn := range fns {
		fn(connected)
	}
}

// Close closes the connection and stops the embedded server, if any.
func (b *Bus) Close() error {
	b.nc.Close()
	b.shutdownEmbedded()
	return nil
}

func (b *Bus) shutdownEmbedded() {
	if b.embedded != nil {
		b.embedded.Shutdown()
		b.embedded.WaitForShutdown()
	}
}

func (b *Bus) disconnected(nc *nats.Conn, err error) {
	if nc.IsClosed() {
		return
	}
	b.metrics.connected.Set(0)
	b.log.Warn("events: NATS unreachable; waiters poll until it is back", "error", err)
	b.changed(false)
}

// connectFailed logs why an attempt to (re)connect failed (a refused login, a bad
// certificate), once for each new reason until the Bus connects: a wrong password must not
// pass for an unreachable server, nor fill the log every 250ms.
func (b *Bus) connectFailed(_ *nats.Conn, err error) {
	if err == nil {
		return
	}
	if msg := err.Error(); b.failure.Swap(msg) != msg {
		b.log.Warn("events: cannot connect to NATS; waiters poll until it works", "error", err)
	}
}

func (b *Bus) connected(nc *nats.Conn) {
	b.failure.Store("")
	b.metrics.connected.Set(1)
	if b.embedded != nil {
		b.log.Info("events: embedded NATS server running in-process")
	} else {
		b.log.Info("events: NATS connected", "url", nc.ConnectedUrlRedacted())
	}
	b.changed(true)
}

func (b *Bus) reconnected(nc *nats.Conn) {
	if b.account != nil {
		// The subscriptions were resent before this runs; Wanted trusts the server's
		// list again once a round trip confirms it has them.
		n := nc.Stats().Reconnects
		b.settle(func(err error) {
			if err == nil && nc.IsConnected() && nc.Stats().Reconnects == n {
				b.settled.Store(n)
			}
		})
	}
	b.failure.Store("")
	b.metrics.connected.Set(1)
	where := "in-process"
	if b.embedded == nil {
		where = nc.ConnectedUrlRedacted()
	}
	b.log.Info("events: NATS reconnected; push wake-up resumes", "url", where)
	b.changed(true)
}

// reject counts a message that failed verification, and logs the first one for each reason.
func (b *Bus) reject(subject, why string) {
	b.metrics.rejected.WithLabelValues(why).Inc()
	if _, logged := b.rejected.LoadOrStore(why, struct{}{}); logged {
		return
	}
	switch why {
	case "stale":
		b.log.Warn("events: dropped a signed message sent too far from this clock: a replay, or instances whose clocks disagree by more than the signature window (logged once; see coordkit_events_rejected_total)", "subject", subject, "window", b.window)
	case "replayed":
		b.log.Warn("events: dropped a copy of a signed message already delivered (logged once; see coordkit_events_rejected_total)", "subject", subject)
	case "sender_limit":
		b.log.Warn("events: dropped a signed message of a new sender: a subscription already remembers the most senders it may (logged once; see coordkit_events_rejected_total)", "subject", subject, "limit", maxSenders)
	default:
		b.log.Warn("events: dropped a message that is not signed with the events key (logged once; see coordkit_events_rejected_total)", "subject", subject, "reason", why)
	}
}

func (b *Bus) asyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	subject := ""
	if sub != nil {
		subject = sub.Subject
	}
	b.log.Warn("events: NATS error", "subject", subject, "error", err)
}
