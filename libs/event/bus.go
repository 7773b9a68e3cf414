// Package event is coordkit's one NATS connection per process: services publish what changed
// (a lock released, a task available) and subscribe to what others published, so waiters are
// pushed awake instead of polling. With no NATS URL it runs an embedded nats-server inside the
// process, so the zero-setup default has push wake-up too.
//
// NATS core delivery is at most once: an event can be lost (a disconnect, a restart). Every
// user of this package must treat an event as a hint that shortens a wait it bounds by other
// means, never as the only way a wait ends.
package event

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
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
}

// Bus is one process's NATS connection. It is safe for concurrent use.
type Bus struct {
	nc       *nats.Conn
	embedded *server.Server  // nil when connected to an outside NATS
	account  *server.Account // the embedded server's, whose subscriptions Wanted reads
	private  bool            // embedded with no Listen address: this Bus is its only client
	log      *slog.Logger
	metrics  *metrics

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
	b := &Bus{log: cfg.Logger, metrics: newMetrics(cfg.Registerer)}
	if b.log == nil {
		b.log = slog.Default()
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
	}
	url := cfg.URL
	switch {
	case url == "":
		ns, err := startEmbedded(cfg.Listen)
		if err != nil {
			return nil, err
		}
		b.embedded, b.account, b.private = ns, ns.GlobalAccount(), cfg.Listen == ""
		opts = append(opts, nats.InProcessServer(ns))
	case cfg.Listen != "":
		return nil, errors.New("event: Listen is for the embedded server; it cannot be set with a NATS URL")
	default:
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		b.shutdownEmbedded()
		return nil, fmt.Errorf("event: connect to NATS %q: %w", url, err)
	}
	b.nc = nc
	if nc.IsConnected() {
		b.up.Store(true)
		b.metrics.connected.Set(1)
	} else {
		b.log.WarnContext(ctx, "events: NATS is not reachable yet; waiters poll until it is", "url", url)
	}
	return b, nil
}

// startEmbedded runs a nats-server inside this process: in-process connections only, or
// also TCP clients on listen.
func startEmbedded(listen string) (*server.Server, error) {
	opts := &server.Options{ServerName: "coordkit-embedded", DontListen: true, NoSigs: true, NoLog: true}
	if listen != "" {
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
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("event: embedded NATS: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("event: embedded NATS did not start (listen %q)", listen)
	}
	return ns, nil
}

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
	if err := b.nc.Publish(subject, data); err != nil {
		b.metrics.publishFailures.Inc()
		return fmt.Errorf("event: publish %s: %w", subject, err)
	}
	return nil
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
// returned function ends the subscription.
func (b *Bus) Subscribe(subject string, fn func(subject string, data []byte)) (unsubscribe func() error, err error) {
	if b.account != nil {
		b.settling.Add(1) // until the server has it (see Wanted)
	}
	sub, err := b.nc.Subscribe(subject, func(m *nats.Msg) { fn(m.Subject, m.Data) })
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
	return sub.Unsubscribe, nil
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

func (b *Bus) connected(nc *nats.Conn) {
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
	b.metrics.connected.Set(1)
	b.log.Info("events: NATS reconnected; push wake-up resumes", "url", nc.ConnectedUrlRedacted())
	b.changed(true)
}

func (b *Bus) asyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	subject := ""
	if sub != nil {
		subject = sub.Subject
	}
	b.log.Warn("events: NATS error", "subject", subject, "error", err)
}
