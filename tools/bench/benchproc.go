package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordkit/coordkit/libs/config"
)

// How long the service child process may take: to answer /readyz at all (it opens its
// backends first: a ZooKeeper session, MySQL's tables), to report its backends ready once
// it answers, and to shut down after SIGTERM before it is killed.
const (
	serviceStartTimeout = 30 * time.Second
	serviceReadyGrace   = 5 * time.Second
	serviceStopTimeout  = 10 * time.Second
)

// serviceProcess is the service that coordbench runs as a child process: a coord binary as
// `coord serve`, so that the service's CPU time is its own and not the clients'.
type serviceProcess struct {
	url    string
	pid    int
	cmd    *exec.Cmd
	cancel context.CancelFunc // starts the shutdown: SIGTERM, SIGKILL after serviceStopTimeout
	done   chan struct{}      // closed once the process exited and was waited for
	out    *tailBuffer        // the end of its stdout and stderr
}

// startServiceProcess starts exe as `coord serve` with scfg on a free loopback port (scfg.addr is
// ignored) and returns once its /readyz answers. The process ends when ctx does, or at stop;
// warn is told when it answers but its backends are still not ready after a grace period,
// as in-process the bench would then measure it all the same.
func startServiceProcess(ctx context.Context, exe string, scfg serveConfig, warn func(string)) (*serviceProcess, error) {
	return startServeArgs(ctx, ctx, exe, func(addr string) ([]string, []string) {
		scfg.addr = addr
		return serveArgs(scfg)
	}, warn)
}

// startServeArgs starts exe with the command line and extra environment that args returns for
// a free loopback address, retried on another one when the address was taken meanwhile, and
// returns once its /readyz answers. The process ends when ctx does; startCtx bounds the wait
// for it to be ready.
func startServeArgs(startCtx, ctx context.Context, exe string, args func(addr string) (argv, env []string), warn func(string)) (*serviceProcess, error) {
	// A port found free can be taken before the child binds it: try another then.
	for attempt := 1; ; attempt++ {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return nil, fmt.Errorf("bench: service process: %w", err)
		}
		argv, env := args(addr)
		p, err := launchService(startCtx, ctx, exe, addr, argv, env, warn)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return p, err
		}
	}
}

// launchService starts exe with args (coord serve listening on addr) and env added to its
// environment, and waits until it is ready; on failure the process is stopped and the error
// holds the end of its output.
func launchService(startCtx, ctx context.Context, exe, addr string, args, env []string, warn func(string)) (*serviceProcess, error) {
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, exe, args...)
	cmd.Env = append(serviceEnv(os.Environ()), env...)
	out := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = serviceProcAttr()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // coord serve drains then
	cmd.WaitDelay = serviceStopTimeout
	p := &serviceProcess{url: "http://" + addr, cmd: cmd, cancel: cancel, done: make(chan struct{}), out: out}

	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child ends, not the process: this
		// goroutine keeps its thread to itself until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait() //nolint:errcheck // stop reads the exit from ProcessState
		close(p.done)
	}()
	if err := <-started; err != nil {
		cancel()
		return nil, fmt.Errorf("bench: service process: %w", err)
	}
	p.pid = cmd.Process.Pid
	if err := p.waitReady(startCtx, warn); err != nil {
		p.stop() //nolint:errcheck // err holds the process's output already
		return nil, err
	}
	return p, nil
}

// serveArgs returns the command line of `coord serve` for the settings the bench sets in
// scfg (see benchServeConfig), and the environment that carries the MySQL DSN and the
// PostgreSQL URL, which may hold a password that a command line would show to every user of
// the machine.
func serveArgs(scfg serveConfig) (args, env []string) {
	args = []string{"serve", "--addr=" + scfg.addr, "--data-dir=" + scfg.dataDir,
		"--log-level=" + scfg.logLevel, "--log-format=" + scfg.logFormat}
	for _, f := range []struct{ name, value string }{
		{"redis-addr", scfg.redisAddr}, {"redlock-addrs", scfg.redlockAddrs},
		{"zk-addrs", scfg.zkAddrs}, {"lock-scope", scfg.lockScope}, {"sqlite-synchronous", scfg.sqliteSync},
		{"postgres-schema", scfg.pgSchema},
	} {
		if f.value != "" {
			args = append(args, "--"+f.name+"="+f.value)
		}
	}
	if scfg.mysqlDSN != "" && scfg.pgURL != "" {
		// coord serve refuses to guess where ID segments live when both databases are
		// set; the lock bench takes no IDs, so the data dir's SQLite file serves.
		args = append(args, "--id-store=sqlite")
	}
	if scfg.mysqlDSN != "" {
		env = append(env, config.EnvName("mysql-dsn")+"="+scfg.mysqlDSN)
	}
	if scfg.pgURL != "" {
		env = append(env, config.EnvName("postgres-url")+"="+scfg.pgURL)
	}
	return args, env
}

// serviceEnv is environ without the COORDKIT_* variables: the child must serve with the
// bench's settings only, as in-process, not with a token file or TLS meant for another
// server.
func serviceEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

// waitReady polls /readyz until it answers 200. A service that answers 503 (a backend not
// ready) gets serviceReadyGrace more and is then taken as it is, with a warning; one that
// does not answer within serviceStartTimeout, or exits, is an error.
func (p *serviceProcess) waitReady(ctx context.Context, warn func(string)) error {
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(serviceStartTimeout)
	var answered time.Time // when it first answered other than 200
	for {
		code, body, err := getReadyz(ctx, hc, p.url)
		switch {
		case err == nil && code == http.StatusOK:
			return nil
		case err == nil && answered.IsZero():
			answered = time.Now()
		case err == nil && time.Since(answered) > serviceReadyGrace:
			warn(fmt.Sprintf("bench: the service's backends are not all ready, measuring it anyway: /readyz %d %s", code, body))
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("bench: service process exited before it was ready (%s): %s", p.cmd.ProcessState, p.out.String())
		case <-ctx.Done():
			return fmt.Errorf("bench: %w", context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
		if answered.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("bench: service process at %s did not answer /readyz within %v (last: %v); its output: %s",
				p.url, serviceStartTimeout, err, p.out.String())
		}
	}
}

// getReadyz asks base's /readyz once and returns its status and body.
func getReadyz(ctx context.Context, hc *http.Client, base string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return 0, "", err
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	return res.StatusCode, strings.Join(strings.Fields(string(body)), " "), err
}

// stop shuts the process down (SIGTERM, SIGKILL after serviceStopTimeout) and waits until it
// is gone. It returns an error when the process did not exit cleanly, with the end of its
// output. Calling it again returns the same.
func (p *serviceProcess) stop() error {
	p.cancel()
	<-p.done
	if st := p.cmd.ProcessState; st != nil && !st.Success() {
		return fmt.Errorf("bench: service process: %s: %s", st, p.out.String())
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it, for a child process's output.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// Write implements io.Writer.
func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

// String returns what is kept, trimmed.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}
