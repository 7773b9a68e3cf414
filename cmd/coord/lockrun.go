package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/coordkit/coordkit/libs/client"
)

// Exit statuses of `coord lock run` when the command never ran, as shells report them.
const (
	exitCannotRun = 126 // found but could not be started
	exitNotFound  = 127 // no such command
)

// lockRunConfig is what `coord lock run` is told besides the key and the command.
type lockRunConfig struct {
	ttl, wait, grace time.Duration
	fair             bool
	owner            string
	timeout          time.Duration
}

func newLockRunCmd(cf *clientFlags) *cobra.Command {
	var cfg lockRunConfig
	c := &cobra.Command{
		Use:   "run KEY [flags] -- CMD [ARGS...]",
		Short: "run a command while holding a lock",
		Long: `Take the lock KEY, run CMD with COORDKIT_FENCING_TOKEN and COORDKIT_LOCK_KEY in its
environment (stdin, stdout and stderr passed through), renew the lease while it runs, and
release the lock when it exits. coord exits with CMD's exit status (128+N when a signal N
killed it), or 1 when the lock stayed taken for --wait.

SIGINT and SIGTERM sent to coord are passed on to CMD. When the lease is lost (the service
said it is gone, or could not confirm it before it expires) CMD gets SIGTERM, and SIGKILL
--grace later if it is still running: stop guarded work on SIGTERM, and send the fencing
token with every write the lock guards.`,
		Example: `  coord lock run nightly-report --ttl 1m -- ./report.sh --all
  coord lock run deploy --wait 10m --fair -- sh -c 'echo "token $COORDKIT_FENCING_TOKEN"; make deploy'`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case dash == 0 || dash > 1:
				return usageErr(cmd, fmt.Errorf("run wants one KEY before --, got %d", dash))
			case len(args) < 2:
				return usageErr(cmd, errors.New("run wants a KEY and a command: coord lock run KEY -- CMD [ARGS...]"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.wait < 0 || cfg.grace < 0 {
				return usageErr(cmd, errors.New("--wait and --grace must not be negative"))
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			cfg.timeout = cf.timeout
			return runLocked(cmd.Context(), c, args[0], args[1:], cfg, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	c.Flags().DurationVar(&cfg.ttl, "ttl", client.DefaultTTL, "lease length; renewed every third of it while CMD runs")
	c.Flags().DurationVar(&cfg.wait, "wait", 0, "how long to wait for a taken lock; 0 tries once")
	c.Flags().BoolVar(&cfg.fair, "fair", false, "wait in line, first come first served across instances (with --wait)")
	c.Flags().StringVar(&cfg.owner, "owner", "", "owner secret (16+ bytes) to acquire as; empty makes a fresh one")
	c.Flags().DurationVar(&cfg.grace, "grace", 10*time.Second, "after the lease is lost and CMD got SIGTERM, how long before SIGKILL")
	return c
}

// runLocked holds key while argv runs; it returns argv's exit status as an exitStatus.
func runLocked(ctx context.Context, c *client.Client, key string, argv []string, cfg lockRunConfig,
	stdin io.Reader, stdout, stderr io.Writer) error {
	opts := []client.LockOption{client.WithTTL(cfg.ttl), client.WithWait(cfg.wait)}
	if cfg.fair {
		opts = append(opts, client.WithFair())
	}
	if cfg.owner != "" {
		opts = append(opts, client.WithOwner(cfg.owner))
	}
	lockCtx, cancel := context.WithTimeout(ctx, cfg.wait+cfg.timeout)
	l, err := c.Lock(lockCtx, key, opts...)
	cancel()
	if errors.Is(err, client.ErrNotAcquired) {
		return fmt.Errorf("%w: %s stayed taken for --wait %s", errNotAcquired, key, cfg.wait)
	}
	if err != nil {
		return err
	}
	// The command's exit status is what coord reports; the release is best effort after it.
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.timeout)
		defer cancel()
		if err := l.Unlock(ctx); err != nil && l.Err() == nil {
			fmt.Fprintf(stderr, "coord: release %s: %v (the lease ends by itself at its expiry)\n", key, err)
		}
	}()

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	stderr = shareable(stderr)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(),
		"COORDKIT_FENCING_TOKEN="+strconv.FormatUint(l.FencingToken(), 10),
		"COORDKIT_LOCK_KEY="+key)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: startsOwnGroup(stdin)}
	if err := cmd.Start(); err != nil {
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return exitStatus{code: code, err: fmt.Errorf("lock run: %w", err)}
	}
	return superviseCommand(cmd, l, sigs, cfg.grace, stderr)
}

// superviseCommand waits for cmd while passing on coord's signals and stopping it when the
// lease is lost: SIGTERM, then SIGKILL after grace.
func superviseCommand(cmd *exec.Cmd, l *client.Lock, sigs <-chan os.Signal, grace time.Duration, stderr io.Writer) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	lost := l.Lost()
	var kill <-chan time.Time
	for {
		select {
		case err := <-done:
			if kill != nil {
				// The lease is lost: what the command started and left running gets the
				// rest of its grace, then SIGKILL, before coord exits.
				stopGroup(cmd, kill)
			}
			return commandStatus(cmd, err)
		case sig := <-sigs:
			_ = signalCommand(cmd, sig) // fails only when it has exited meanwhile: done tells
		case <-lost:
			lost = nil
			fmt.Fprintf(stderr, "coord: %v; sending the command SIGTERM\n", l.Err())
			_ = signalCommand(cmd, syscall.SIGTERM)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(stderr, "coord: the command still runs %s after SIGTERM; sending SIGKILL\n", grace)
			_ = signalCommand(cmd, syscall.SIGKILL)
		}
	}
}

// shareable returns w as is when it is a file, which the command writes directly, or else
// (a test's buffer) wrapped so that coord's messages and the copy of the command's output
// may write it at once.
func shareable(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// commandStatus turns the end of cmd into coord's exit status: its own, or 128+N when
// signal N killed it, as shells report it.
func commandStatus(cmd *exec.Cmd, waitErr error) error {
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return exitStatus{code: exitCannotRun, err: fmt.Errorf("lock run: %w", waitErr)}
	}
	ps := cmd.ProcessState
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitStatus{code: 128 + int(ws.Signal())}
	}
	if ps.ExitCode() == 0 {
		return nil
	}
	return exitStatus{code: ps.ExitCode()}
}
