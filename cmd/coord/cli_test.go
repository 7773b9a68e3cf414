package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestMain lets a test run the test binary itself as coord (COORD_TEST_MAIN=1), for what only
// a real process shows: its exit code, and signals sent to it.
func TestMain(m *testing.M) {
	if os.Getenv("COORD_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// result is what one in-process run of coord left: its exit code and output.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs one command line in-process as main would, and returns its exit code and output.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// commandPaths lists the arguments that reach every command of the tree under cmd.
func commandPaths(cmd *cobra.Command, prefix []string) [][]string {
	var out [][]string
	for _, c := range cmd.Commands() {
		path := append(append([]string{}, prefix...), c.Name())
		out = append(out, path)
		out = append(out, commandPaths(c, path)...)
	}
	return out
}

// TestHelpExitsZero: -h and --help on every group and command print its help on stdout, name
// each flag's environment variable, and exit 0.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	paths := append(commandPaths(newRootCmd(nil, nil, nil), nil), []string{})
	if len(paths) < 25 {
		t.Fatalf("found %d commands, want every command of the tree", len(paths))
	}
	for _, path := range paths {
		for _, h := range []string{"-h", "--help"} {
			r := cli(t, append(append([]string{}, path...), h)...)
			name := strings.Join(append(path, h), " ")
			if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
				t.Errorf("coord %s = exit %d, stdout %q, stderr %q; want its help on stdout and exit 0", name, r.code, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout, "--server") && !strings.Contains(r.stdout, "[$COORDKIT_SERVER]") {
				t.Errorf("coord %s help does not name COORDKIT_SERVER:\n%s", name, r.stdout)
			}
		}
	}
	for _, group := range []string{"lock", "id", "task"} {
		if r := cli(t, group); r.code != 0 || !strings.Contains(r.stdout, "Available Commands:") {
			t.Errorf("coord %s = exit %d\n%s%s; want its help and exit 0", group, r.code, r.stdout, r.stderr)
		}
	}
}

// TestNoBenchCommand: the benchmarks are coordbench (tools/bench), not part of coord, which
// has no command that flushes a database.
func TestNoBenchCommand(t *testing.T) {
	t.Parallel()
	if r := cli(t, "bench"); r.code != exitUsage || !strings.Contains(r.stderr, "unknown command") {
		t.Errorf("coord bench = exit %d, stderr %q; want exit 2, unknown command", r.code, r.stderr)
	}
	if r := cli(t, "--help"); strings.Contains(r.stdout, "bench") {
		t.Errorf("coord --help names bench:\n%s", r.stdout)
	}
}

// TestEnvOnlyForTheCommandThatRuns: a variable is read only by a command that has the flag,
// a flag beats it, and a bad value is a usage error naming it. Not parallel: it sets the
// environment.
func TestEnvOnlyForTheCommandThatRuns(t *testing.T) {
	url := serve(t)
	t.Setenv("COORDKIT_TTL", "10") // no unit: bad for --ttl
	t.Setenv("COORDKIT_SERVER", url)
	t.Setenv("COORDKIT_LIMIT", "not-a-number") // task dead's flag only
	// What `coord lock run` gives its command for its own key's lease: a release of another
	// key inside the command must not be checked against it.
	t.Setenv("COORDKIT_FENCING_TOKEN", "999999")

	if r := cli(t, "lock", "inspect", "cli:env"); r.code != 0 || !strings.Contains(r.stdout, "is free") {
		t.Fatalf("inspect with COORDKIT_TTL=10 = exit %d\n%s%s; want it to ignore a flag it does not have", r.code, r.stdout, r.stderr)
	}
	r := cli(t, "lock", "acquire", "cli:env")
	if r.code != exitUsage || !strings.Contains(r.stderr, "COORDKIT_TTL") || !strings.Contains(r.stderr, "coord lock acquire --help") {
		t.Fatalf("acquire with COORDKIT_TTL=10 = exit %d, stderr %q; want exit 2 naming COORDKIT_TTL", r.code, r.stderr)
	}
	if r := cli(t, "lock", "acquire", "cli:env", "--ttl", "1m", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"acquired":true`) {
		t.Fatalf("acquire --ttl 1m with COORDKIT_TTL=10 = exit %d\n%s%s; want the flag to win", r.code, r.stdout, r.stderr)
	}
	const owner = "cli-env-owner-0123456789"
	if r := cli(t, "lock", "acquire", "cli:env-release", "--ttl", "1m", "--owner", owner); r.code != 0 {
		t.Fatalf("acquire = exit %d\n%s", r.code, r.stderr)
	}
	if r := cli(t, "lock", "release", "cli:env-release", "--owner", owner); r.code != 0 {
		t.Fatalf("release with COORDKIT_FENCING_TOKEN=999999 set = exit %d %q; want it released: that variable names the lease of lock run's key", r.code, r.stderr)
	}
	if r := cli(t, "task", "stats", "cli-env"); r.code != 0 {
		t.Fatalf("task stats with COORDKIT_LIMIT set = exit %d\n%s%s; want it ignored", r.code, r.stdout, r.stderr)
	}
	if r := cli(t, "task", "dead", "cli-env"); r.code != exitUsage || !strings.Contains(r.stderr, "COORDKIT_LIMIT") {
		t.Fatalf("task dead with COORDKIT_LIMIT=not-a-number = exit %d, stderr %q; want exit 2 naming it", r.code, r.stderr)
	}
}

// TestExitCodes: 0 done, 1 the answer is no, 2 usage, 3 no answer; one line on stderr for a
// runtime error and no usage dump, the error and a pointer to the help for a usage error.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	url := serve(t)
	dead := "http://" + freeAddr(t)
	const busy = "cli:exit-busy"
	if r := cli(t, "lock", "acquire", busy, "--server", url, "--ttl", "1m"); r.code != 0 {
		t.Fatalf("acquire = exit %d\n%s", r.code, r.stderr)
	}
	tests := []struct {
		name      string
		args      []string
		code      int
		stderr    string // the first line starts with it
		usageHint string // the command whose help the second line points to; "" for none
	}{
		{name: "ok", args: []string{"lock", "inspect", "cli:exit-free", "--server", url}, code: 0},
		{name: "busy lock", args: []string{"lock", "acquire", busy, "--server", url}, code: 1, stderr: "coord: not acquired"},
		{name: "wrong owner", args: []string{"lock", "release", busy, "--server", url, "--owner", "wrong-owner-0123456789"}, code: 1, stderr: "coord: permission_denied"},
		{name: "not found", args: []string{"task", "get", "cli-exit", "nope", "--server", url}, code: 1, stderr: "coord: not_found"},
		{name: "unknown service", args: []string{"health", "--server", url, "--service", "nope"}, code: 1, stderr: "coord: not_found"},
		{name: "bad flag", args: []string{"lock", "acquire", "k", "--bogus"}, code: 2, stderr: "coord: unknown flag: --bogus", usageHint: "coord lock acquire"},
		{name: "bad flag value", args: []string{"lock", "acquire", "k", "--ttl", "soon"}, code: 2, stderr: "coord: invalid argument", usageHint: "coord lock acquire"},
		{name: "missing argument", args: []string{"lock", "acquire"}, code: 2, stderr: "coord: acquire wants KEY", usageHint: "coord lock acquire"},
		{name: "unknown command", args: []string{"lock", "aquire", "k"}, code: 2, stderr: `coord: unknown command "aquire"`, usageHint: "coord lock"},
		{name: "unknown top command", args: []string{"locks"}, code: 2, stderr: `coord: unknown command "locks"`, usageHint: "coord"},
		{name: "missing owner", args: []string{"lock", "release", busy}, code: 2, stderr: "coord: --owner is required", usageHint: "coord lock release"},
		{name: "bad mode", args: []string{"id", "next", "--mode", "ulid"}, code: 2, stderr: "coord: --mode", usageHint: "coord id next"},
		{name: "invalid_argument from the service", args: []string{"lock", "acquire", "k", "--server", url, "--ttl", "1ms"}, code: 2, stderr: "coord: invalid_argument"},
		{name: "dead server", args: []string{"lock", "inspect", "k", "--server", dead}, code: 3, stderr: "coord: unavailable"},
		{name: "dead server health", args: []string{"health", "--server", dead}, code: 3, stderr: "coord: unavailable"},
		{name: "deadline", args: []string{"lock", "inspect", "k", "--server", url, "--timeout", "1ns"}, code: 3, stderr: "coord: deadline_exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, tt.args...)
			if r.code != tt.code {
				t.Fatalf("coord %s = exit %d, want %d\nstdout %q\nstderr %q", strings.Join(tt.args, " "), r.code, tt.code, r.stdout, r.stderr)
			}
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			if tt.stderr == "" {
				if r.stderr != "" {
					t.Fatalf("stderr %q, want nothing", r.stderr)
				}
				return
			}
			if !strings.HasPrefix(lines[0], tt.stderr) {
				t.Fatalf("stderr %q, want a first line starting %q", r.stderr, tt.stderr)
			}
			want := 1
			if tt.usageHint != "" {
				want = 2
				if lines[len(lines)-1] != "Run '"+tt.usageHint+" --help' for usage." {
					t.Fatalf("stderr %q, want a last line pointing to %s --help", r.stderr, tt.usageHint)
				}
			}
			if len(lines) != want || strings.Contains(r.stderr, "Usage:") {
				t.Fatalf("stderr %q is %d lines, want %d and no usage dump", r.stderr, len(lines), want)
			}
		})
	}
}

// TestJSONOutput: --json prints the API's JSON on one line, leaving unset fields out (no
// null), and errors as one JSON object on stderr.
func TestJSONOutput(t *testing.T) {
	t.Parallel()
	url := serve(t)
	const key = "cli:json"
	noNull := func(t *testing.T, r result, want string) {
		t.Helper()
		if strings.Contains(r.stdout, "null") || !strings.Contains(r.stdout, want) || strings.Count(r.stdout, "\n") != 1 || !json.Valid([]byte(r.stdout)) {
			t.Fatalf("stdout %q, want one line of JSON with %s and no null", r.stdout, want)
		}
		// Compact, whatever the build: protojson adds spaces after some commas in some
		// binaries only (on purpose, against byte comparisons), which broke scripts that
		// grep for "acquired":true.
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(strings.TrimSuffix(r.stdout, "\n"))); err != nil || compact.String()+"\n" != r.stdout {
			t.Fatalf("stdout %q, want compact JSON %q", r.stdout, compact.String())
		}
	}
	r := cli(t, "lock", "acquire", key, "--server", url, "--json")
	noNull(t, r, `"lease"`)
	r = cli(t, "lock", "acquire", key, "--server", url, "--json")
	noNull(t, r, `"holder"`)
	if r.code != 1 || strings.Contains(r.stdout, `"lease"`) || strings.Contains(r.stdout, `"acquired"`) {
		t.Fatalf("busy acquire --json = exit %d, %q; want exit 1 and no lease or acquired:false (the API leaves them out)", r.code, r.stdout)
	}
	noNull(t, cli(t, "lock", "inspect", "cli:json-free", "--server", url, "--json"), `"state"`)

	for _, tt := range []struct {
		args []string
		code string
	}{
		{[]string{"lock", "inspect", "k", "--server", "http://" + freeAddr(t)}, "unavailable"},
		{[]string{"lock", "acquire", key, "--server", url}, "not_acquired"},
		{[]string{"lock", "acquire", "k", "--ttl", "soon"}, "invalid_argument"},
		{[]string{"task", "get", "cli-json", "nope", "--server", url}, "not_found"},
	} {
		r := cli(t, append(tt.args, "--json")...)
		var e struct{ Code, Message string }
		if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || e.Code != tt.code || e.Message == "" || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("coord %s --json: stderr %q (%v), want one JSON line with code %s", strings.Join(tt.args, " "), r.stderr, err, tt.code)
		}
	}
}

// TestVersionAndCompletion: version in both forms, and cobra's completion scripts.
func TestVersionAndCompletion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if r := cli(t, args...); r.code != 0 || !strings.HasPrefix(r.stdout, "coord ") || !strings.Contains(r.stdout, "go1.") {
			t.Fatalf("coord %s = exit %d %q, want the version and the Go version", args[0], r.code, r.stdout)
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if r := cli(t, "completion", shell); r.code != 0 || !strings.Contains(r.stdout, "coord") || len(r.stdout) < 500 {
			t.Fatalf("coord completion %s = exit %d, %d bytes", shell, r.code, len(r.stdout))
		}
	}
}

// TestHealth: SERVING exits 0, for the server and for one service.
func TestHealth(t *testing.T) {
	t.Parallel()
	url := serve(t)
	for _, service := range []string{"", "coordkit.lock.v1.LockService"} {
		if r := cli(t, "health", "--server", url, "--service", service); r.code != 0 || r.stdout != "SERVING\n" {
			t.Fatalf("health --service %q = exit %d %q %q, want SERVING", service, r.code, r.stdout, r.stderr)
		}
	}
	if r := cli(t, "health", "--server", url, "--json"); r.code != 0 || r.stdout != `{"status":"SERVING"}`+"\n" {
		t.Fatalf("health --json = exit %d %q", r.code, r.stdout)
	}
}
