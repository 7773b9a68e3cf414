package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// pausedHolder is `coord lock run --ttl 2s KEY -- stalewriter`: a real process holding the
// sale's lock, frozen with SIGSTOP (coord, whose watchdog renews the lease, and its command
// alike) after its command read the stock.
type pausedHolder struct {
	cmd   *exec.Cmd
	out   *testenv.LogBuffer
	done  chan struct{}
	dir   string
	token uint64 // the fencing token it holds
	child int    // stalewriter's pid, the leader of its own process group
	// heldUntil is a lower bound of the expiry its lease was promised: the service measures
	// a lease from the moment it got the request, after the test started coord lock run, and
	// may only let go of it at or after its reported expiry. No other holder may get the
	// lock before it (a backend that ends leases early passes every other check here, since
	// a buyer's critical section is much shorter than its ttl).
	heldUntil time.Time
}

// pausedTTL is the paused holder's lease.
const pausedTTL = 2 * time.Second

// holdAndPause starts the holder through instance in, waits until its command holds the lock
// and has read the stock, and pauses both process groups.
func holdAndPause(t *testing.T, s *sale, in *instance) *pausedHolder {
	t.Helper()
	p := &pausedHolder{out: &testenv.LogBuffer{}, done: make(chan struct{}), dir: t.TempDir()}
	p.cmd = exec.Command(coordPath(t), "lock", "run", s.key, "--server", in.URL(), "--backend", s.backend,
		"--ttl", pausedTTL.String(), "--wait", "30s", "--grace", "30s", "--",
		helperBinary(t, "stalewriter"), "-dsn", testenv.MySQLDSN(), "-stock", s.stock, "-orders", s.orders,
		"-item", saleItem, "-dir", p.dir)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.heldUntil = time.Now().Add(pausedTTL) // monotonic: compared with the buyers' time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }() //nolint:errcheck // resume reads the output
	t.Cleanup(func() {
		for _, g := range []int{p.child, p.cmd.Process.Pid} {
			if g > 0 {
				syscall.Kill(-g, syscall.SIGKILL) //nolint:errcheck // it may have exited
				syscall.Kill(-g, syscall.SIGCONT) //nolint:errcheck
			}
		}
		<-p.done
		if t.Failed() {
			t.Logf("paused holder output:\n%s", p.out.String())
		}
	})
	held := p.waitFile(t, "held")
	var qty int
	if _, err := fmt.Sscan(held, &p.child, &p.token, &qty); err != nil || qty != saleStock {
		t.Fatalf("paused holder reported %q (%v); want pid, token and the full stock %d", held, err, saleStock)
	}
	p.signal(t, syscall.SIGSTOP)
	return p
}

// resume lets the holder's command write (it does not know its lease is gone) and continues
// both groups; it returns the stock rows the stale write changed.
func (p *pausedHolder) resume(t *testing.T) int64 {
	t.Helper()
	if err := os.WriteFile(filepath.Join(p.dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p.signal(t, syscall.SIGCONT)
	res := p.waitFile(t, "result")
	n, err := strconv.ParseInt(res, 10, 64)
	if err != nil {
		t.Fatalf("stale write result %q: %v", res, err)
	}
	select {
	case <-p.done: // its command ended: coord lock run releases (refused: not its lock) and exits
	case <-time.After(30 * time.Second):
		t.Fatalf("coord lock run did not exit within 30s of its command's end:\n%s", p.out.String())
	}
	return n
}

func (p *pausedHolder) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	for _, g := range []int{p.child, p.cmd.Process.Pid} {
		if err := syscall.Kill(-g, sig); err != nil {
			t.Fatalf("signal %v to process group %d: %v\n%s", sig, g, err, p.out.String())
		}
	}
}

// waitFile waits for the command's report name and returns it.
func (p *pausedHolder) waitFile(t *testing.T, name string) string {
	t.Helper()
	var b []byte
	pollUntil(t, 30*time.Second, "paused holder's "+name+" file", func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(p.dir, name))
		select {
		case <-p.done:
			if err != nil {
				t.Fatalf("coord lock run exited before writing %s:\n%s", name, p.out.String())
			}
		default:
		}
		return err == nil
	})
	return string(b)
}
