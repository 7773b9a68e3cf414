package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/testenv"
)

// readyTimeout bounds how long a started coord may take to answer /readyz: generous, since a
// loaded 2-core machine runs the whole suite at once.
const readyTimeout = 30 * time.Second

// instance is one `coord serve` process on a loopback port that it keeps across restarts, so
// clients that know its URL find it again. The test may kill it (SIGKILL), pause it
// (SIGSTOP/SIGCONT), stop it gracefully (SIGTERM) and start it again.
type instance struct {
	t    testing.TB
	name string   // for messages: "coord-1"
	args []string // serve flags, without --addr
	env  []string // extra environment, KEY=VALUE
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *testenv.LogBuffer
	logs string // the output of earlier runs, for failure messages
}

// startInstance runs `coord serve --addr 127.0.0.1:<free port> args...` with its own data
// directory (unless args set --data-dir) and waits until /readyz answers 200. It is killed
// when the test ends; when the test failed, its output is logged.
func startInstance(t testing.TB, name string, args ...string) *instance {
	t.Helper()
	return startInstanceEnv(t, name, nil, args...)
}

// startInstanceEnv is startInstance with extra KEY=VALUE environment, for settings given the
// way compose gives them (COORDKIT_*).
func startInstanceEnv(t testing.TB, name string, env []string, args ...string) *instance {
	t.Helper()
	in := &instance{t: t, name: name, env: env,
		args: append([]string{"--data-dir", t.TempDir()}, args...)}
	t.Cleanup(func() {
		in.Kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, in.Output())
		}
	})
	var err error
	for range 5 { // a free port can be taken before coord binds it
		in.port = testenv.FreePort(t)
		if err = in.start(); err == nil {
			return in
		}
	}
	t.Fatalf("e2e: start %s: %v", name, err)
	return nil
}

// startCluster starts n instances named coord-1..coord-n with the same flags.
func startCluster(t testing.TB, n int, args ...string) []*instance {
	t.Helper()
	ins := make([]*instance, n)
	for i := range ins {
		ins[i] = startInstance(t, fmt.Sprintf("coord-%d", i+1), args...)
	}
	return ins
}

// URL is the instance's base URL.
func (in *instance) URL() string { return "http://127.0.0.1:" + strconv.Itoa(in.port) }

// Client is an SDK client of the instance.
func (in *instance) Client(opts ...client.Option) *client.Client {
	return client.New(in.URL(), opts...)
}

// Output is everything the instance printed, across restarts.
func (in *instance) Output() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.logs
	if in.out != nil {
		s += in.out.String()
	}
	return s
}

// Running says whether the process is up (it may be paused).
func (in *instance) Running() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cmd != nil
}

// PID is the running process's id, 0 when stopped.
func (in *instance) PID() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil {
		return 0
	}
	return in.cmd.Process.Pid
}

func (in *instance) start() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd != nil {
		return nil
	}
	if in.out != nil {
		in.logs += in.out.String() + "--- restart ---\n"
	}
	in.out = &testenv.LogBuffer{}
	args := append([]string{"serve", "--addr", "127.0.0.1:" + strconv.Itoa(in.port)}, in.args...)
	cmd := exec.Command(coordPath(in.t), args...)
	cmd.Env = append(os.Environ(), in.env...)
	// Dies with the test binary, even when a timeout or a closed pipe kills it before its
	// cleanups run: no coord outlives its test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = in.out, in.out
	done, err := testenv.StartUntilReady(cmd, in.name, in.out, in.ready, readyTimeout)
	if err != nil {
		return err
	}
	in.cmd, in.done = cmd, done
	return nil
}

// ready is nil once /readyz answers 200: every backend of every service is reachable.
func (in *instance) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL()+"/readyz", nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", res.Status)
	}
	return nil
}

// Start starts a stopped instance again on its port and waits until it is ready.
func (in *instance) Start() {
	in.t.Helper()
	if err := in.start(); err != nil {
		in.t.Fatalf("e2e: restart %s: %v", in.name, err)
	}
}

// Kill sends SIGKILL, as a crash or the OOM killer would, and waits until the process is
// gone. A paused instance is killed too. Killing a stopped instance does nothing.
func (in *instance) Kill() { in.stop(syscall.SIGKILL, 0) }

// Terminate sends SIGTERM, as an orchestrator's stop does, and waits up to grace for a clean
// exit before it kills the process.
func (in *instance) Terminate(grace time.Duration) { in.stop(syscall.SIGTERM, grace) }

// Restart terminates the instance gracefully (up to 10s) and starts it again: a rolling
// restart's step.
func (in *instance) Restart() {
	in.t.Helper()
	in.Terminate(10 * time.Second)
	in.Start()
}

func (in *instance) stop(sig syscall.Signal, grace time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil {
		return
	}
	in.cmd.Process.Signal(sig)             //nolint:errcheck // it may have exited; done tells
	in.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck // a paused process must see the signal
	if grace > 0 {
		select {
		case <-in.done:
		case <-time.After(grace):
			in.t.Errorf("e2e: %s did not exit within %v of %v; killing it", in.name, grace, sig)
			in.cmd.Process.Kill() //nolint:errcheck // giving up on it
			<-in.done
		}
	} else {
		<-in.done
	}
	in.cmd = nil
}

// Pause stops the process with SIGSTOP: it holds its connections but answers nothing, as a
// long GC pause or a frozen VM would. Resume continues it.
func (in *instance) Pause() { in.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (in *instance) Resume() { in.signal(syscall.SIGCONT) }

func (in *instance) signal(sig syscall.Signal) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil {
		in.t.Fatalf("e2e: %s is not running", in.name)
	}
	if err := in.cmd.Process.Signal(sig); err != nil {
		in.t.Fatalf("e2e: signal %s: %v", in.name, err)
	}
}

// TestInstanceLifecycle: the harness itself works on the static binary: an instance serves,
// survives a pause, comes back on the same port after SIGKILL and after SIGTERM, and its
// `coord health` (the image's HEALTHCHECK) follows it.
func TestInstanceLifecycle(t *testing.T) {
	in := startInstance(t, "coord-1")
	health := func() int {
		cmd := exec.Command(coordPath(t), "health", "--server", in.URL(), "--timeout", "2s")
		out, err := cmd.CombinedOutput()
		if err == nil {
			return 0
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		t.Fatalf("coord health: %v: %s", err, out)
		return -1
	}
	if code := health(); code != 0 {
		t.Fatalf("coord health on a serving instance: exit %d, want 0", code)
	}
	in.Pause()
	in.Resume()
	if code := health(); code != 0 {
		t.Fatalf("coord health after SIGSTOP/SIGCONT: exit %d, want 0", code)
	}
	in.Kill()
	if code := health(); code == 0 {
		t.Fatal("coord health on a killed instance: exit 0, want unhealthy")
	}
	in.Start()
	if code := health(); code != 0 {
		t.Fatalf("coord health after restart: exit %d, want 0", code)
	}
	in.Restart()
	if code := health(); code != 0 {
		t.Fatalf("coord health after a graceful restart: exit %d, want 0", code)
	}
}
