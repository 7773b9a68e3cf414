package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/testenv"
)

// readyTimeout bounds how long a started coord may take to answer /readyz: generous, since a
// loaded 2-core machine runs the whole suite at once.
const readyTimeout = 30 * time.Second

// instance is one `coord serve` process (a testenv.Process: Stop is SIGKILL, Terminate is
// SIGTERM, Signal pauses and continues it, Start brings it back on the same port).
type instance struct {
	*testenv.Process
	t    testing.TB
	name string // for messages: "coord-1"
}

// startInstance runs `coord serve --addr 127.0.0.1:<free port> args...` with its own data
// directory (unless args set --data-dir) and waits until it has printed its serving line
// and /readyz answers 200. It is killed when the test ends; when the test failed, its output
// is logged.
func startInstance(t testing.TB, name string, args ...string) *instance {
	t.Helper()
	return startInstanceEnv(t, name, nil, args...)
}

// startInstanceEnv is startInstance with extra KEY=VALUE environment, for settings given the
// way compose gives them (COORDKIT_*).
func startInstanceEnv(t testing.TB, name string, env []string, args ...string) *instance {
	t.Helper()
	args = append([]string{"--data-dir", t.TempDir()}, args...)
	in := &instance{t: t, name: name}
	in.Process = testenv.StartProcess(t, testenv.ProcessConfig{
		Name: name,
		Bin:  coordPath(t),
		Args: func(port int) []string {
			return append([]string{"serve", "--addr", "127.0.0.1:" + strconv.Itoa(port)}, args...)
		},
		Env:       env,
		Ready:     readyz,
		Timeout:   readyTimeout,
		Listening: "serving", // the msg of the line coord logs (text or JSON) once it has bound --addr
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s output:\n%s", name, in.Output())
		}
	})
	return in
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
func (in *instance) URL() string { return "http://127.0.0.1:" + strconv.Itoa(in.Port()) }

// Client is an SDK client of the instance.
func (in *instance) Client(opts ...client.Option) *client.Client {
	return client.New(in.URL(), opts...)
}

// Restart terminates the instance gracefully (up to 10s) and starts it again: a rolling
// restart's step.
func (in *instance) Restart() {
	in.t.Helper()
	if err := in.Terminate(10 * time.Second); err != nil {
		in.t.Error(err)
	}
	in.Start()
}

// readyz is nil once /readyz on port answers 200: every backend of every service is
// reachable.
func readyz(port int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/readyz", nil)
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
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGCONT} {
		if err := in.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	if code := health(); code != 0 {
		t.Fatalf("coord health after SIGSTOP/SIGCONT: exit %d, want 0", code)
	}
	in.Stop() // SIGKILL
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
