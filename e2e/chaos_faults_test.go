package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// The faults of TestChaos. Each waits chaosPreFault under load, injects its fault, heals it
// and returns when healed; the run then goes on for chaosPostHeal.

// killHolder finds a lease held right now, preferably by a holder that means to keep it past
// the ttl (so that it goes on writing, believing, while its watchdog cannot renew), confirms
// through another instance that the backend has it, and SIGKILLs the instance that granted it
// and renews it. The instance comes back on its port after the ttl.
func killHolder(r *chaosRun) chaosFault {
	time.Sleep(chaosPreFault)
	prefer := time.Now().Add(3 * time.Second) // after this, the held lease with the most time left will do
	giveUp := time.Now().Add(15 * time.Second)
	for {
		now := r.rec.now()
		var pick *chaosLease
		for _, l := range r.rec.held() {
			if left := l.Planned - now; left > 100*time.Millisecond && (pick == nil || left > pick.Planned-now) {
				pick = &l
			}
		}
		if pick != nil && pick.Planned-now < chaosTTL/2 && time.Now().Before(prefer) {
			pick = nil
		}
		if pick != nil && r.confirmHeld(*pick) {
			in := r.ins[pick.Instance]
			pid := in.PID()
			at := r.rec.now()
			in.Stop() // SIGKILL
			time.Sleep(chaosTTL + 500*time.Millisecond)
			in.Start()
			return chaosFault{at: at, healed: r.rec.now(), victim: pick,
				note: fmt.Sprintf("killed coord-%d (pid %d) holding %s token %d, restarted it %v later",
					pick.Instance+1, pid, pick.Key, pick.Token, chaosTTL+500*time.Millisecond)}
		}
		if time.Now().After(giveUp) {
			r.t.Fatal("no held lease to kill the instance of within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// confirmHeld asks an instance other than l's whether the backend holds l's key with l's token.
func (r *chaosRun) confirmHeld(l chaosLease) bool {
	other := r.clients[(l.Instance+1)%len(r.clients)]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := other.Locks().Inspect(ctx, &lockv1.InspectRequest{Key: l.Key, Backend: r.row.backend})
	return err == nil && res.GetState().GetHeld() && res.GetState().GetFencingToken() == l.Token
}

// rollingRestart restarts every instance gracefully (SIGTERM, then start on the same port), one
// after the other, as a deployment does; the others keep serving meanwhile.
func rollingRestart(r *chaosRun) chaosFault {
	time.Sleep(chaosPreFault)
	at := r.rec.now()
	var took []string
	for _, in := range r.ins {
		began := time.Now()
		in.Restart()
		took = append(took, time.Since(began).Round(time.Millisecond).String())
		time.Sleep(700 * time.Millisecond)
	}
	return chaosFault{at: at, healed: r.rec.now(), served: true,
		note: "restarted coord-1.." + strconv.Itoa(len(r.ins)) + " in turn, each took " + strings.Join(took, ", ")}
}

// redlockNodeLoss runs Redlock on three private Redis nodes (no persistence) and kills one
// mid-run: a majority of 2 keeps locking. The node comes back empty only after the longest
// ttl in use has passed, the delayed restart the redlock backend requires of a node that
// loses its data, and must then take part again.
func redlockNodeLoss(t *testing.T) ([]string, chaosFaultFunc) {
	nodes := []*testenv.RedisProcess{testenv.StartRedis(t), testenv.StartRedis(t), testenv.StartRedis(t)}
	addrs := []string{nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr()}
	return []string{"--redlock-addrs", strings.Join(addrs, ",")}, func(r *chaosRun) chaosFault {
		time.Sleep(chaosPreFault)
		at := r.rec.now()
		nodes[0].Stop()
		down := chaosTTL + time.Second
		time.Sleep(down)
		nodes[0].Start()
		healed := r.rec.now()
		// The node came back empty; the next acquires must take it again (locks and the
		// fencing counters they raise), or a second node's loss would stop the service.
		rdb := nodes[0].Client(r.t)
		rejoined := time.Now()
		for {
			n, err := rdb.DBSize(context.Background()).Result()
			if err == nil && n > 0 {
				break
			}
			if time.Since(rejoined) > chaosTTL+chaosServeSlack {
				r.t.Errorf("redlock node %s holds no key %v after its restart (%d, %v): it takes no part again",
					addrs[0], time.Since(rejoined), n, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return chaosFault{at: at, healed: healed, served: true,
			note: fmt.Sprintf("redlock node %s down %v, back empty, taken again %v after its restart",
				addrs[0], down, time.Since(rejoined).Round(time.Millisecond))}
	}
}

// zookeeperRestart runs the zookeeper backend on a private server and kills it (SIGKILL)
// mid-run; it restarts 2s later with its data, well within the instances' 10s sessions.
func zookeeperRestart(t *testing.T) ([]string, chaosFaultFunc) {
	z := testenv.StartZooKeeper(t)
	return []string{"--zk-addrs", z.Addr()}, func(r *chaosRun) chaosFault {
		time.Sleep(chaosPreFault)
		at := r.rec.now()
		z.Stop()
		time.Sleep(2 * time.Second)
		began := time.Now()
		z.Start()
		return chaosFault{at: at, healed: r.rec.now(), excused: true,
			note: fmt.Sprintf("zookeeper killed, restarted after 2s (start took %v)", time.Since(began).Round(time.Millisecond))}
	}
}

// mariadbRestart runs the mysql backend on a private MariaDB and restarts it mid-run: a
// clean shutdown (SIGTERM), 1s down, start again on the same data.
func mariadbRestart(t *testing.T) ([]string, chaosFaultFunc) {
	db := testenv.StartMariaDB(t)
	return []string{"--mysql-dsn", db.DSN()}, func(r *chaosRun) chaosFault {
		time.Sleep(chaosPreFault)
		at := r.rec.now()
		began := time.Now()
		db.Stop()
		stopped := time.Since(began)
		time.Sleep(time.Second)
		began = time.Now()
		db.Start()
		return chaosFault{at: at, healed: r.rec.now(), excused: true,
			note: fmt.Sprintf("mariadb shut down in %v, 1s down, started in %v", stopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))}
	}
}

// Bounds of the NATS row's wake-up probes. While NATS is down a waiter polls, every 50-100ms
// once its backoff has grown; while it is up a waiter makes no attempt until an event (or
// the holder's expiry, or the 1s recheck of the first waiter in line) wakes it. So a probe
// waiter behind a 10s lease makes about one attempt a second with push and ten or more
// polling, and it is woken by a release on another instance far sooner than the 1s recheck
// only when the release's event reaches it.
const (
	chaosProbeTTL        = 10 * time.Second
	chaosPushLatency     = 500 * time.Millisecond // well under the 1s recheck
	chaosPollLatency     = 1500 * time.Millisecond
	chaosPushMaxAttempts = 3 // in the 1.2s window: recheck at 1s, plus one spare
	chaosPollMinAttempts = 5
	chaosProbeWindow     = 1200 * time.Millisecond
)

// natsRestart points every instance at a private NATS and kills it with waiters blocked:
// waiters must fall back to polling (and be served within their bound), and once NATS is back
// and every instance reconnected, a release must push its waiter awake again. A probe on
// each side measures it: a holder on one instance and a waiter on another, on the redlock
// backend so that the attempt and wake-up counters see the probe alone (the load runs on
// redis).
func natsRestart(t *testing.T) ([]string, chaosFaultFunc) {
	nats := testenv.StartNATS(t)
	args := []string{"--redis-addr", testenv.RedisAddr(), "--redlock-addrs", strings.Join(testenv.RedlockAddrs(), ","),
		"--nats-url", nats.URL()}
	return args, func(r *chaosRun) chaosFault {
		time.Sleep(chaosPreFault)
		r.waitConnected(1)
		at := r.rec.now()
		nats.Stop()
		r.waitConnected(0)
		down := r.wakeProbe("down")
		nats.Start()
		reconnectFrom := time.Now()
		r.waitConnected(1)
		reconnect := time.Since(reconnectFrom)
		healed := r.rec.now()
		up := r.wakeProbe("up")
		if down.latency > chaosPollLatency {
			r.t.Errorf("NATS down: the probe waiter got the lock %v after the release, want within %v by polling", down.latency, chaosPollLatency)
		}
		if down.attempts < chaosPollMinAttempts {
			r.t.Errorf("NATS down: the probe waiter made %d attempts in %v, want at least %d (polling)", down.attempts, chaosProbeWindow, chaosPollMinAttempts)
		}
		if up.latency > chaosPushLatency {
			r.t.Errorf("NATS back: the probe waiter got the lock %v after the release, want within %v (pushed)", up.latency, chaosPushLatency)
		}
		if up.attempts > chaosPushMaxAttempts {
			r.t.Errorf("NATS back: the probe waiter made %d attempts in %v, want at most %d (push, not polling)", up.attempts, chaosProbeWindow, chaosPushMaxAttempts)
		}
		if up.events < 1 {
			r.t.Errorf("NATS back: the probe waiter's instance counted %d event wake-ups, want at least 1", up.events)
		}
		return chaosFault{at: at, healed: healed, served: true,
			note: fmt.Sprintf("NATS down: wake-up %v, %d attempts/%v; reconnected in %v; NATS back: wake-up %v, %d attempts/%v, %d event wake-ups",
				down.latency.Round(time.Millisecond), down.attempts, chaosProbeWindow, reconnect.Round(time.Millisecond),
				up.latency.Round(time.Millisecond), up.attempts, chaosProbeWindow, up.events)}
	}
}

// wakeProbeResult is what one wake-up probe measured.
type wakeProbeResult struct {
	latency  time.Duration // from the holder's Unlock call to the waiter's Lock returning
	attempts int           // the waiter's instance's backend attempts during the window
	events   int           // its event wake-ups from the window's start to the waiter's grant
}

// wakeProbe holds a fresh key through instance 1 with a long lease, blocks a waiter on it
// through instance 2, counts the waiter instance's attempts over chaosProbeWindow, releases,
// and measures how soon the waiter holds the lock.
func (r *chaosRun) wakeProbe(name string) wakeProbeResult {
	t := r.t
	const backend = "redlock"
	key := r.keys[0] + ":probe-" + name
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := []client.LockOption{client.WithTTL(chaosProbeTTL), client.WithLockBackend(backend)}
	holder, err := r.clients[0].Lock(ctx, key, append(opts, client.WithWait(5*time.Second))...)
	if err != nil {
		t.Fatalf("probe %s: holder's Lock: %v", name, err)
	}
	type grant struct {
		l   *client.Lock
		err error
		at  time.Time
	}
	got := make(chan grant, 1)
	go func() {
		l, err := r.clients[1].Lock(ctx, key, append(opts, client.WithWait(8*time.Second))...)
		got <- grant{l, err, time.Now()}
	}()
	time.Sleep(500 * time.Millisecond) // the waiter is in line, its backoff grown
	waiter := r.ins[1]
	a0 := chaosMetric(t, waiter, "coordkit_lock_waiter_attempts_total", `backend="`+backend+`"`)
	e0 := chaosMetric(t, waiter, "coordkit_lock_wakeups_total", `backend="`+backend+`"`, `cause="event"`)
	time.Sleep(chaosProbeWindow)
	a1 := chaosMetric(t, waiter, "coordkit_lock_waiter_attempts_total", `backend="`+backend+`"`)
	select {
	case g := <-got:
		t.Fatalf("probe %s: the waiter returned before the release: %v", name, g.err)
	default:
	}
	released := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatalf("probe %s: holder's Unlock: %v", name, err)
	}
	g := <-got
	if g.err != nil {
		t.Fatalf("probe %s: waiter's Lock: %v", name, g.err)
	}
	e1 := chaosMetric(t, waiter, "coordkit_lock_wakeups_total", `backend="`+backend+`"`, `cause="event"`)
	g.l.Unlock(ctx) //nolint:errcheck // the probe is over
	return wakeProbeResult{latency: g.at.Sub(released), attempts: int(a1 - a0), events: int(e1 - e0)}
}

// waitConnected waits until every running instance reports coordkit_events_connected = want.
func (r *chaosRun) waitConnected(want float64) {
	deadline := time.Now().Add(15 * time.Second)
	for _, in := range r.ins {
		for chaosMetric(r.t, in, "coordkit_events_connected") != want {
			if time.Now().After(deadline) {
				r.t.Fatalf("%s: coordkit_events_connected still not %v after 15s", in.name, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// chaosMetric is the sum of the samples of the Prometheus series name whose labels include
// every one of labels (as `key="value"`), from the instance's /metrics.
func chaosMetric(t *testing.T, in *instance, name string, labels ...string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: GET /metrics: %v", in.name, err)
	}
	defer res.Body.Close()
	var sum float64
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		series, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if n, _, _ := strings.Cut(series, "{"); n != name {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(series, l)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("%s: metric line %q: %v", in.name, line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: read /metrics: %v", in.name, err)
	}
	return sum
}
