package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitFile waits for path to exist and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("%s was not written", path)
	return ""
}

// heldUntil is a shell command that writes its fencing token to dir/started, then runs until
// dir/stop exists.
func heldUntil(dir string) []string {
	return []string{"sh", "-c", `echo "$COORDKIT_FENCING_TOKEN" > "$1/started.tmp" && mv "$1/started.tmp" "$1/started"; while [ ! -e "$1/stop" ]; do sleep 0.02; done`, "sh", dir}
}

// TestLockRunCommand: the command sees the key and token, its exit status (or 128+signal)
// is coord's, and the lock is free once it exits.
func TestLockRunCommand(t *testing.T) {
	t.Parallel()
	url := serve(t)
	tests := []struct {
		name   string
		script string
		code   int
	}{
		{name: "status", script: `echo "$COORDKIT_LOCK_KEY $COORDKIT_FENCING_TOKEN"; exit 7`, code: 7},
		{name: "success", script: `echo "$COORDKIT_LOCK_KEY $COORDKIT_FENCING_TOKEN"`, code: 0},
		{name: "killed", script: `echo "$COORDKIT_LOCK_KEY $COORDKIT_FENCING_TOKEN"; kill -KILL $$`, code: 128 + 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "cli:run-" + tt.name
			r := cli(t, "lock", "run", key, "--server", url, "--", "sh", "-c", tt.script)
			if r.code != tt.code {
				t.Fatalf("lock run = exit %d, want %d\n%s%s", r.code, tt.code, r.stdout, r.stderr)
			}
			fields := strings.Fields(r.stdout)
			if len(fields) != 2 || fields[0] != key {
				t.Fatalf("command printed %q, want the key and the fencing token", r.stdout)
			}
			if n, err := strconv.ParseUint(fields[1], 10, 64); err != nil || n == 0 {
				t.Fatalf("COORDKIT_FENCING_TOKEN = %q, want a positive integer", fields[1])
			}
			if r.stderr != "" {
				t.Fatalf("stderr %q, want nothing: coord reports only the command's status", r.stderr)
			}
			if r := cli(t, "lock", "inspect", key, "--server", url); !strings.Contains(r.stdout, "is free") {
				t.Fatalf("after lock run: %s, want the lock released", r.stdout)
			}
		})
	}
	if r := cli(t, "lock", "run", "cli:run-missing", "--server", url, "--", "no-such-command-coordkit"); r.code != exitNotFound || !strings.Contains(r.stderr, "no-such-command-coordkit") {
		t.Fatalf("lock run of a missing command = exit %d %q, want %d", r.code, r.stderr, exitNotFound)
	}
	if r := cli(t, "lock", "run", "cli:run-nocmd", "--server", url); r.code != exitUsage {
		t.Fatalf("lock run with no command = exit %d, want 2", r.code)
	}
}

// TestLockRunExcludes: while one `coord lock run` holds the key, a second one with a short
// --wait exits 1 without running its command, and one with a long --wait runs right after
// the first ends, with a greater fencing token.
func TestLockRunExcludes(t *testing.T) {
	t.Parallel()
	url := serve(t)
	const key = "cli:run-excl"
	first, waiter := t.TempDir(), t.TempDir()
	done := make(chan result, 1)
	go func() {
		done <- cli(t, append([]string{"lock", "run", key, "--server", url, "--"}, heldUntil(first)...)...)
	}()
	firstToken := waitFile(t, filepath.Join(first, "started"))

	never := filepath.Join(t.TempDir(), "ran")
	r := cli(t, "lock", "run", key, "--server", url, "--wait", "300ms", "--", "touch", never)
	if r.code != exitNo || !strings.Contains(r.stderr, "not acquired") {
		t.Fatalf("second lock run = exit %d %q, want 1, not acquired", r.code, r.stderr)
	}
	if _, err := os.Stat(never); err == nil {
		t.Fatal("the second command ran while the first held the lock")
	}

	waited := make(chan result, 1)
	go func() {
		waited <- cli(t, append([]string{"lock", "run", key, "--server", url, "--wait", "30s", "--"}, heldUntil(waiter)...)...)
	}()
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(waiter, "started")); err == nil {
		t.Fatal("the waiting command started while the first held the lock")
	}
	if err := os.WriteFile(filepath.Join(first, "stop"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.code != 0 {
		t.Fatalf("first lock run = exit %d %q", r.code, r.stderr)
	}
	if !newer(waitFile(t, filepath.Join(waiter, "started")), firstToken) {
		t.Fatal("the waiter's fencing token is not greater than the first holder's")
	}
	if err := os.WriteFile(filepath.Join(waiter, "stop"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := <-waited; r.code != 0 {
		t.Fatalf("waiting lock run = exit %d %q", r.code, r.stderr)
	}
}

// TestLockRunLeaseLost: when the lease is lost (here released by force with its owner through
// the raw API), the command gets SIGTERM, and SIGKILL --grace later if it ignores it.
func TestLockRunLeaseLost(t *testing.T) {
	t.Parallel()
	url := serve(t)
	tests := []struct {
		name, trap, grace string
		code              int
	}{
		// A long grace: the shell exits on SIGTERM at once, however loaded the host.
		{name: "stops on SIGTERM", trap: `trap 'echo got-term; exit 9' TERM`, grace: "10s", code: 9},
		{name: "killed after grace", trap: `trap '' TERM`, grace: "300ms", code: 128 + 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key, owner, dir := "cli:run-lost-"+strings.ReplaceAll(tt.name, " ", "-"), "cli-run-owner-0123456789", t.TempDir()
			script := tt.trap + `; echo go > "$1/started"; while :; do sleep 0.02; done`
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				done <- cli(t, "lock", "run", key, "--server", url, "--ttl", "1s", "--owner", owner, "--grace", tt.grace, "--", "sh", "-c", script, "sh", dir)
			}()
			waitFile(t, filepath.Join(dir, "started"))
			if r := cli(t, "lock", "release", key, "--server", url, "--owner", owner); r.code != 0 {
				t.Fatalf("release by force = exit %d %q", r.code, r.stderr)
			}
			select {
			case r := <-done:
				if r.code != tt.code || !strings.Contains(r.stderr, "lease lost") {
					t.Fatalf("lock run = exit %d, stderr %q; want %d after the lease was lost", r.code, r.stderr, tt.code)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("the command still runs %s after its lease was lost", time.Since(start))
			}
		})
	}
}

// TestLockRunProcess runs coord as a real process: SIGTERM sent to coord reaches the command,
// coord exits with the command's status and releases the lock; a bad flag exits 2.
func TestLockRunProcess(t *testing.T) {
	t.Parallel()
	url := serve(t)
	const key = "cli:run-process"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "lock", "run", key, "--server", url, "--",
		"sh", "-c", `trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.02; done`)
	cmd.Env = append(os.Environ(), "COORD_TEST_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("command printed %q, want ready", lines.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || lines.Text() != "got-term" {
		t.Fatalf("command printed %q, want got-term: coord did not pass SIGTERM on", lines.Text())
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 5 {
		t.Fatalf("coord exited %d, want the command's 5", code)
	}
	if r := cli(t, "lock", "inspect", key, "--server", url); !strings.Contains(r.stdout, "is free") {
		t.Fatalf("after coord was stopped: %s, want the lock released", r.stdout)
	}

	bad := exec.CommandContext(ctx, os.Args[0], "lock", "acquire", "k", "--bogus")
	bad.Env = append(os.Environ(), "COORD_TEST_MAIN=1")
	if out, _ := bad.CombinedOutput(); bad.ProcessState.ExitCode() != exitUsage {
		t.Fatalf("coord lock acquire --bogus exited %d (%s), want 2", bad.ProcessState.ExitCode(), out)
	}
}

// TestLockRunLeaseLostStopsWhatItStarted: when the lease is lost, what the command started
// stops too (its process group gets SIGTERM, then SIGKILL after --grace), even when the
// command itself exits at once: `sh -c 'a; b'` or a background job must not go on doing the
// guarded work after the lock is gone.
func TestLockRunLeaseLostStopsWhatItStarted(t *testing.T) {
	t.Parallel()
	url := serve(t)
	tests := []struct {
		name, script string
	}{
		{name: "child stops on SIGTERM", script: `sleep 600 & echo $! > "$1/child"; echo go > "$1/started"; wait`},
		{name: "child and command ignore SIGTERM", script: `trap '' TERM; sleep 600 & echo $! > "$1/child"; echo go > "$1/started"; wait`},
		{name: "command exits, child ignores SIGTERM", script: `(trap '' TERM; exec sleep 600) & echo $! > "$1/child"; echo go > "$1/started"; wait`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key, owner, dir := "cli:run-group-"+strconv.Itoa(i), "cli-run-group-owner-0123456789", t.TempDir()
			done := make(chan result, 1)
			go func() {
				done <- cli(t, "lock", "run", key, "--server", url, "--ttl", "1s", "--owner", owner, "--grace", "500ms", "--", "sh", "-c", tt.script, "sh", dir)
			}()
			waitFile(t, filepath.Join(dir, "started"))
			child, err := strconv.Atoi(waitFile(t, filepath.Join(dir, "child")))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
			if r := cli(t, "lock", "release", key, "--server", url, "--owner", owner); r.code != 0 {
				t.Fatalf("release by force = exit %d %q", r.code, r.stderr)
			}
			select {
			case r := <-done:
				if !strings.Contains(r.stderr, "lease lost") {
					t.Fatalf("lock run = exit %d, stderr %q; want the lease lost", r.code, r.stderr)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("lock run still runs 15s after its lease was lost")
			}
			for deadline := time.Now().Add(5 * time.Second); running(child); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the command's child %d still runs after lock run exited on a lost lease", child)
				}
			}
		})
	}
}

// running says whether process pid exists and is no zombie.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}
