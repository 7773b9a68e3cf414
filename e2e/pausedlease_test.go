package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/testenv"
)

// pausedLeases is how many leases the paused holder keeps on each backend: one trial each.
const pausedLeases = 40

// pausedLeaseTTL is their ttl: 3s, so that 400 leases renewed every third of it leave the
// holder its margins on a loaded CI host (with 1s, a Redlock renewal, whose nodes get a
// tenth of the ttl, missed its deadline before the pause there).
const pausedLeaseTTL = 3 * time.Second

// pausedClockSkew is how far the service's clock is ahead of the holder's, for the second
// half of the leases.
const pausedClockSkew = 5 * time.Second

// pausedLease is one lease as e2e/testdata/pauseholder reports it.
type pausedLease struct {
	Backend    string `json:"backend"`
	Key        string `json:"key"`
	Token      uint64 `json:"token"`
	Skewed     bool   `json:"skewed"`
	First      string `json:"first"`
	FirstLost  bool   `json:"firstLost"`
	LostClosed bool   `json:"lostClosed"`
	CtxErr     string `json:"ctxErr"`
	DoneClosed bool   `json:"doneClosed"`
	Err        string `json:"err"`
	LeaseLost  bool   `json:"leaseLost"`
}

// TestPausedHolderLearnsFirst: a holder process frozen (SIGSTOP, as a long GC pause or a
// descheduled container would) past its leases while a rival takes every lock with a higher
// token must find each lease lost on its very first check after SIGCONT, whichever of
// Lost(), Context().Err() and Err() that check is, before any of its timers could run: the
// SDK compares the deadline with the clock on each call instead of waiting for a timer to
// notice. 40 leases per backend, taken at staggered moments so that the pause lands in every
// phase of their renewal cycles, make 40 trials per backend in one pause; every backend is
// in the same holder and the same pause. 40 more per backend go through a client that reads
// every expires_at 5s late, as a holder whose clock is 5s behind the service's would: the
// SDK must not care.
func TestPausedHolderLearnsFirst(t *testing.T) {
	t.Parallel()
	backends := []string{"redis", "redlock", "zookeeper", "mysql", "postgres", "sqlite"}
	in := startInstance(t, "coord-1", "--nats-url", testenv.NATSURL(), "--mysql-dsn", testenv.MySQLDSN(),
		"--postgres-url", testenv.PostgresURL(), "--postgres-schema", testenv.PostgresSchema(t), "--id-store", "mysql",
		"--redis-addr", testenv.RedisAddr(), "--redlock-addrs", strings.Join(testenv.RedlockAddrs(), ","),
		"--zk-addrs", strings.Join(testenv.ZooKeeperAddrs(), ","))
	prefix := testenv.Prefix(t)

	proc := startPaused(t, "pauseholder", "-server", in.URL(), "-backends", strings.Join(backends, ","),
		"-prefix", prefix, "-n", fmt.Sprint(pausedLeases), "-ttl", pausedLeaseTTL.String(), "-skew", pausedClockSkew.String())

	var held struct{ Held []pausedLease }
	if err := json.Unmarshal(proc.next("its leases"), &held); err != nil || len(held.Held) != 2*pausedLeases*len(backends) {
		t.Fatalf("pauseholder's leases: %v, %d of %d", err, len(held.Held), 2*pausedLeases*len(backends))
	}
	stoppedAt := proc.stop()

	// A rival takes every lock: each is its own the moment the holder's lease runs out.
	rival := in.Client()
	tokens := make(map[string]uint64, len(held.Held))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range held.Held {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := rival.Lock(ctx, h.Key, client.WithLockBackend(h.Backend), client.WithTTL(30*time.Second), client.WithWait(25*time.Second))
			if err != nil {
				t.Errorf("rival on %s %s: %v", h.Backend, h.Key, err)
				return
			}
			t.Cleanup(func() { l.Unlock(context.Background()) }) //nolint:errcheck // the test is over
			mu.Lock()
			tokens[h.Key] = l.FencingToken()
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("the rival held every lock %v after SIGSTOP", time.Since(stoppedAt).Round(time.Millisecond))
	proc.cont()

	var got struct {
		Checks []pausedLease
		Pause  string
	}
	if err := json.Unmarshal(proc.next("its checks"), &got); err != nil {
		t.Fatal(err)
	}
	t.Logf("the holder's clock jumped %s across the pause", got.Pause)
	learned := map[string]int{}
	for _, c := range got.Checks {
		if c.Skewed {
			c.Backend += fmt.Sprintf("/clock %v behind", pausedClockSkew)
		}
		if tok := tokens[c.Key]; tok <= c.Token {
			t.Errorf("%s %s: rival's token %d not above the holder's %d", c.Backend, c.Key, tok, c.Token)
		}
		switch {
		case !c.FirstLost:
			t.Errorf("%s %s: the first check after the pause (%s) says the lease is held; the rival holds it with token %d > %d",
				c.Backend, c.Key, c.First, tokens[c.Key], c.Token)
		case !c.LostClosed || c.CtxErr == "" || !c.DoneClosed || !c.LeaseLost:
			t.Errorf("%s %s: after the first check: Lost closed %v, Context().Err() %q, Done closed %v, Err %q; want all to say lost",
				c.Backend, c.Key, c.LostClosed, c.CtxErr, c.DoneClosed, c.Err)
		default:
			learned[c.Backend]++
		}
	}
	for _, b := range backends {
		for _, b := range []string{b, b + fmt.Sprintf("/clock %v behind", pausedClockSkew)} {
			if learned[b] != pausedLeases {
				t.Errorf("%s: the holder learned first in %d of %d trials", b, learned[b], pausedLeases)
			}
		}
	}
	t.Logf("learned first on its first check, per backend: %v", learned)
}

// pausedProc is a helper process of the paused-process scenarios (e2e/testdata/pauseholder,
// pauseworker), which reports its state in JSON lines on stdout.
type pausedProc struct {
	t      *testing.T
	name   string
	pid    int
	lines  chan string
	exited chan error
}

// startPaused starts e2e/testdata/<name> with args; it is killed when the test ends.
func startPaused(t *testing.T, name string, args ...string) *pausedProc {
	t.Helper()
	cmd := exec.Command(helperBinary(t, name), args...)
	stderr := &testenv.LogBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pausedProc{t: t, name: name, pid: cmd.Process.Pid, lines: make(chan string), exited: make(chan error, 1)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout) //nolint:errcheck // drain
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		syscall.Kill(p.pid, syscall.SIGKILL) //nolint:errcheck // it may have exited
		syscall.Kill(p.pid, syscall.SIGCONT) //nolint:errcheck
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	return p
}

// next is the process's next report, what it should be.
func (p *pausedProc) next(what string) []byte {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("%s exited before reporting %s", p.name, what)
		}
		return []byte(l)
	case <-time.After(60 * time.Second):
		p.t.Fatalf("%s did not report %s within 60s", p.name, what)
	}
	return nil
}

// stop freezes the process with SIGSTOP and returns when it was sent, once it took effect.
func (p *pausedProc) stop() time.Time {
	p.t.Helper()
	if err := syscall.Kill(p.pid, syscall.SIGSTOP); err != nil {
		p.t.Fatal(err)
	}
	at := time.Now()
	pollUntil(p.t, 10*time.Second, p.name+" stopped", func() bool { return processState(p.pid) == 'T' })
	return at
}

// cont resumes the process with SIGCONT.
func (p *pausedProc) cont() {
	p.t.Helper()
	if err := syscall.Kill(p.pid, syscall.SIGCONT); err != nil {
		p.t.Fatal(err)
	}
}

// wait is the process's exit error once it has exited, within timeout.
func (p *pausedProc) wait(timeout time.Duration) error {
	select {
	case err := <-p.exited:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v", p.name, timeout)
	}
}

// processState is the state letter of /proc/pid/stat (T: stopped), or 0.
func processState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}
