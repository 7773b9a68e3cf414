package e2e

// deploy/Dockerfile, read line by line, and its HEALTHCHECK command run for real against a
// coord instance. Each test says which image mistake it catches.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// dockerInstr is one Dockerfile instruction, continuation lines joined.
type dockerInstr struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// dockerStage is one FROM and the instructions after it.
type dockerStage struct {
	base, name string
	instrs     []dockerInstr
}

// dockerfile is deploy/Dockerfile read line by line: it is ours and plain (no heredocs, no
// parser directives that matter), so no BuildKit parser is needed.
type dockerfile struct{ stages []dockerStage }

// dockerfileParse splits text into stages of instructions; comments and blank lines go,
// lines ending in a backslash continue (comment lines inside a continuation are dropped, as
// Docker does).
func dockerfileParse(text string) (dockerfile, error) {
	var df dockerfile
	var cur strings.Builder
	flush := func() error {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := dockerInstr{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			if len(f) == 0 {
				return errors.New("FROM without an image")
			}
			st := dockerStage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			df.stages = append(df.stages, st)
			return nil
		}
		if len(df.stages) == 0 {
			return fmt.Errorf("%s before the first FROM", in.cmd)
		}
		last := &df.stages[len(df.stages)-1]
		last.instrs = append(last.instrs, in)
		return nil
	}
	for raw := range strings.Lines(text) {
		line := strings.TrimRight(raw, " \t\r\n")
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		if err := flush(); err != nil {
			return df, err
		}
	}
	if err := flush(); err != nil {
		return df, err
	}
	if len(df.stages) == 0 {
		return df, errors.New("no FROM")
	}
	return df, nil
}

// dockerfileRead parses deploy/Dockerfile.
func dockerfileRead(t testing.TB) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df, err := dockerfileParse(string(b))
	if err != nil {
		t.Fatalf("deploy/Dockerfile: %v", err)
	}
	return df
}

func (d dockerfile) final() dockerStage { return d.stages[len(d.stages)-1] }

// args returns the arguments of every instruction cmd of the stage.
func (s dockerStage) args(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// env is the stage's ENV, in both the KEY=VALUE and the legacy KEY VALUE forms.
func (s dockerStage) env() map[string]string {
	env := map[string]string{}
	for _, a := range s.args("ENV") {
		f := strings.Fields(a)
		if len(f) > 0 && !strings.Contains(f[0], "=") {
			env[f[0]] = strings.Join(f[1:], " ")
			continue
		}
		for _, kv := range f {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = strings.Trim(v, `"'`)
		}
	}
	return env
}

// dockerExecForm decodes an instruction's JSON-array (exec) form, the one that runs without a shell.
func dockerExecForm(args string) ([]string, error) {
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil || len(argv) == 0 {
		return nil, fmt.Errorf("%q is not in exec form [\"binary\", \"arg\", ...]", args)
	}
	return argv, nil
}

// healthcheck is the exec-form command of the stage's HEALTHCHECK CMD.
func (s dockerStage) healthcheck() ([]string, error) {
	hcs := s.args("HEALTHCHECK")
	if len(hcs) != 1 {
		return nil, fmt.Errorf("deploy/Dockerfile's final stage has %d HEALTHCHECKs, want 1", len(hcs))
	}
	_, cmd, ok := strings.Cut(" "+hcs[0]+" ", " CMD ")
	if !ok {
		return nil, fmt.Errorf("HEALTHCHECK %q has no CMD", hcs[0])
	}
	return dockerExecForm(strings.TrimSpace(cmd))
}

// dockerfileProblems lists what keeps an image from being the one CI tested, small and safe:
// a FROM not pinned (scratch and earlier stages aside); no build stage running
// deploy/build-static.sh, or a final stage that does not COPY that output to the path its
// exec-form ENTRYPOINT runs; a final base with a shell (not scratch or distroless); a root
// or missing USER, or one by name (scratch has no /etc/passwd to look it up); a HEALTHCHECK
// that is not the shipped binary's `health` in exec form on the port ENV COORDKIT_ADDR listens
// on and EXPOSE names; a COORDKIT_ADDR on one interface (the container's loopback: healthy to
// its own HEALTHCHECK, unreachable through a published port); a default command that is not
// `serve`; a data directory the USER cannot write; no CA roots (rediss://, TLS to MySQL).
func dockerfileProblems(df dockerfile) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	final := df.final()
	stageNames := map[string]bool{}
	for _, st := range df.stages {
		if problem := imagePinProblem(st.base); st.base != "scratch" && !stageNames[st.base] && problem != "" {
			bad("FROM %s is not pinned: %s", st.base, problem)
		}
		if st.name != "" {
			stageNames[st.name] = true
		}
	}
	if final.base != "scratch" && !strings.HasPrefix(final.base, "gcr.io/distroless/") {
		bad("final stage FROM %s: want scratch or distroless, an image without a shell", final.base)
	}

	var builtBy, builtAt string
	for _, st := range df.stages[:len(df.stages)-1] {
		for _, run := range st.args("RUN") {
			if _, after, ok := strings.Cut(run, "deploy/build-static.sh"); ok {
				if f := strings.Fields(after); len(f) > 0 {
					builtBy, builtAt = st.name, f[0]
				}
				// compose's build arg reaches the script only through an ARG of this stage.
				if !slices.ContainsFunc(st.args("ARG"), func(a string) bool { return strings.HasPrefix(a, "COORDKIT_VERSION") }) {
					bad("stage %s runs deploy/build-static.sh without ARG COORDKIT_VERSION: `coord version` in the image would not say its tag", st.name)
				}
			}
		}
	}
	if builtAt == "" {
		bad("no build stage RUNs deploy/build-static.sh OUTPUT: the image would not build coord the way CI does")
	}
	entry, err := dockerExecForm(strings.Join(final.args("ENTRYPOINT"), ""))
	if err != nil {
		bad("ENTRYPOINT: %v", err)
		return problems
	}
	binary := entry[0]
	copied := slices.ContainsFunc(final.args("COPY"), func(a string) bool {
		f := strings.Fields(a)
		return slices.Contains(f, "--from="+builtBy) && len(f) >= 2 && f[len(f)-2] == builtAt && f[len(f)-1] == binary
	})
	if builtAt != "" && !copied {
		bad("the final stage does not COPY --from=%s %s %s: ENTRYPOINT would not run what build-static.sh built", builtBy, builtAt, binary)
	}

	var user string
	users := final.args("USER")
	if len(users) == 0 {
		bad("the final stage has no USER: coord would run as root")
	} else if u, _, _ := strings.Cut(users[len(users)-1], ":"); u == "0" || u == "root" {
		bad("final USER %s is root", users[len(users)-1])
	} else if _, err := strconv.ParseUint(u, 10, 32); err != nil && final.base == "scratch" {
		bad("final USER %s is a name; scratch has no /etc/passwd, give a numeric uid:gid", users[len(users)-1])
	} else {
		user = users[len(users)-1]
	}

	var cmd []string
	if cmds := final.args("CMD"); len(cmds) > 0 {
		if cmd, err = dockerExecForm(cmds[len(cmds)-1]); err != nil {
			bad("CMD: %v", err)
		}
	}
	if argv := append(slices.Clone(entry), cmd...); len(argv) < 2 || argv[1] != "serve" {
		bad("the image runs %q by default, want %q serve ...: a container that does not serve exits at once", argv, binary)
	}
	dataDir := final.env()[coordkitEnvPrefix+"DATA_DIR"]
	if dataDir != "" && user != "" && !slices.ContainsFunc(final.args("COPY"), func(a string) bool {
		f := strings.Fields(a)
		return len(f) >= 2 && strings.TrimSuffix(f[len(f)-1], "/") == dataDir && slices.Contains(f, "--chown="+user)
	}) {
		bad("no COPY --chown=%s puts COORDKIT_DATA_DIR=%s in place: USER %s could not write the embedded store", user, dataDir, user)
	}
	if final.base == "scratch" && !slices.ContainsFunc(final.args("COPY"), func(a string) bool {
		return strings.HasSuffix(a, " /etc/ssl/certs/ca-certificates.crt")
	}) {
		bad("the final stage has no /etc/ssl/certs/ca-certificates.crt: rediss:// and TLS to MySQL would fail")
	}

	hc, err := final.healthcheck()
	if err != nil {
		bad("%v", err)
		return problems
	}
	if len(hc) < 2 || hc[0] != binary || hc[1] != "health" {
		bad("HEALTHCHECK CMD %q, want [%q, \"health\", ...]: the shipped binary's own check", hc, binary)
	}
	addr := final.env()[coordkitEnvPrefix+"ADDR"]
	hp, err1 := healthServerPort(hc)
	lp, err2 := addrPortOf(addr)
	switch {
	case err1 != nil || err2 != nil:
		bad("HEALTHCHECK port or ENV COORDKIT_ADDR: %v", errors.Join(err1, err2))
	case hp != lp:
		bad("HEALTHCHECK asks port %d, ENV COORDKIT_ADDR=%s listens on %d", hp, addr, lp)
	case !listensOnAll(addr):
		bad("ENV COORDKIT_ADDR=%s listens on one interface; a published port reaches the container's eth0, not its loopback: want 0.0.0.0 or [::]", addr)
	case !slices.Contains(final.args("EXPOSE"), strconv.Itoa(lp)):
		bad("EXPOSE %v does not include the listen port of COORDKIT_ADDR=%s", final.args("EXPOSE"), addr)
	}
	return problems
}

// listensOnAll says whether host:port binds every interface (0.0.0.0, [::] or an empty host).
func listensOnAll(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

// TestDockerfile: deploy/Dockerfile passes dockerfileProblems (and the script it runs
// exists); the table shows the checker rejecting each mistake in a small Dockerfile.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	for _, problem := range dockerfileProblems(dockerfileRead(t)) {
		t.Errorf("deploy/Dockerfile: %s", problem)
	}
	if _, err := os.Stat(filepath.Join(repoRoot(), "deploy", "build-static.sh")); err != nil {
		t.Errorf("the Dockerfile runs deploy/build-static.sh: %v", err)
	}

	// A good Dockerfile, and each mistake as a replacement of one of its lines.
	const good = `FROM golang:1.26.8-bookworm AS build
ARG COORDKIT_VERSION=
RUN deploy/build-static.sh /out/coord
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/coord /coord
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV COORDKIT_ADDR=0.0.0.0:8080 \
    COORDKIT_DATA_DIR=/data
EXPOSE 8080
HEALTHCHECK --interval=5s \
  CMD ["/coord", "health", "--server", "http://127.0.0.1:8080"]
ENTRYPOINT ["/coord"]
CMD ["serve"]
`
	cases := []struct{ name, old, new, want string }{
		{"good", "", "", ""},
		{"unpinned base", "golang:1.26.8-bookworm", "golang:1-bookworm", "not pinned"},
		{"latest base", "golang:1.26.8-bookworm", "golang", "not pinned"},
		{"shell in the image", "FROM scratch", "FROM alpine:3.22", "without a shell"},
		{"own go build", "RUN deploy/build-static.sh /out/coord", "RUN go build -o /out/coord ./cmd/coord", "build-static.sh"},
		{"copies something else", "COPY --from=build /out/coord /coord", "COPY --from=build /out/other /coord", "does not COPY"},
		{"root", "USER 65532:65532", "USER root", "root"},
		{"no user", "USER 65532:65532\n", "", "no USER"},
		{"shell-form healthcheck", `CMD ["/coord", "health", "--server", "http://127.0.0.1:8080"]`, "CMD /coord health --server http://127.0.0.1:8080", "exec form"},
		{"healthcheck via curl", `CMD ["/coord", "health",`, `CMD ["/usr/bin/curl", "health",`, "own check"},
		{"healthcheck on another port", "http://127.0.0.1:8080", "http://127.0.0.1:9090", "asks port 9090"},
		{"port not exposed", "EXPOSE 8080", "EXPOSE 9090", "EXPOSE"},
		{"listens on loopback", "COORDKIT_ADDR=0.0.0.0:8080", "COORDKIT_ADDR=127.0.0.1:8080", "one interface"},
		{"user by name", "USER 65532:65532", "USER nobody", "numeric"},
		{"default command not serve", `CMD ["serve"]`, `CMD ["version"]`, "by default"},
		{"no default command", `CMD ["serve"]` + "\n", "", "by default"},
		{"data dir owned by root", "COPY --from=build --chown=65532:65532 /out/data /data", "COPY --from=build /out/data /data", "could not write"},
		{"version not passed", "ARG COORDKIT_VERSION=\n", "", "ARG COORDKIT_VERSION"},
		{"no CA roots", "COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n", "", "ca-certificates"},
	}
	for _, c := range cases {
		t.Run("checker/"+c.name, func(t *testing.T) {
			text := strings.Replace(good, c.old, c.new, 1)
			if c.old != "" && text == good {
				t.Fatalf("case does not change the Dockerfile: %q not found", c.old)
			}
			df, err := dockerfileParse(text)
			if err != nil {
				t.Fatalf("parse: %v\n%s", err, text)
			}
			problems := dockerfileProblems(df)
			switch {
			case c.want == "" && len(problems) > 0:
				t.Errorf("checker rejects a good Dockerfile: %q", problems)
			case c.want != "" && !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }):
				t.Errorf("checker's problems %q, want one containing %q\n%s", problems, c.want, text)
			}
		})
	}
}

// healthcheckExit runs a `coord health` argv with exactly env (a scratch container has nothing
// else) and returns its exit code.
func healthcheckExit(t testing.TB, argv, env []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("%q: %v: %s", argv, err, out)
	return -1, ""
}

// TestDockerfileHealthcheckRuns runs the image's HEALTHCHECK command itself, as Docker would
// (no shell, the container's environment: the image's ENV plus compose's coord settings),
// against a coord started with the image's ENV: healthy is exit 0; on a port nobody serves
// it must exit non-zero (3: unreachable), or Docker would call a dead container healthy.
func TestDockerfileHealthcheckRuns(t *testing.T) {
	t.Parallel()
	final := dockerfileRead(t).final()
	hc, err := final.healthcheck()
	if err != nil {
		t.Fatal(err)
	}
	image := final.env()
	var serveEnv []string // the harness gives --addr and --data-dir as flags, which win anyway
	for _, k := range slices.Sorted(maps.Keys(image)) {
		if strings.HasPrefix(k, coordkitEnvPrefix) && k != coordkitEnvPrefix+"ADDR" && k != coordkitEnvPrefix+"DATA_DIR" {
			serveEnv = append(serveEnv, k+"="+image[k])
		}
	}
	in := startInstanceEnv(t, "coord-1", serveEnv)

	containerEnv := maps.Clone(image)
	maps.Copy(containerEnv, composeEnv(composeLoad(t, composeFullStack, nil).Services["coord-1"]))
	var env []string
	for _, k := range slices.Sorted(maps.Keys(containerEnv)) {
		env = append(env, k+"="+containerEnv[k])
	}
	// The image's argv with the image's path of coord replaced by the built binary and the
	// URL's port by the instance's (or a dead one).
	argvOn := func(port int) []string {
		argv := slices.Clone(hc)
		argv[0] = coordPath(t)
		i := slices.Index(argv, "--server")
		u, err := url.Parse(argv[i+1])
		if err != nil {
			t.Fatal(err)
		}
		u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
		argv[i+1] = u.String()
		return argv
	}

	if code, out := healthcheckExit(t, argvOn(in.Port()), env); code != 0 {
		t.Errorf("the image's HEALTHCHECK on a serving coord: exit %d, want 0\n%s", code, out)
	}
	if code, out := healthcheckExit(t, argvOn(testenv.FreePort(t)), env); code != 3 {
		t.Errorf("the image's HEALTHCHECK on a port nobody serves: exit %d, want 3 (unreachable)\n%s", code, out)
	}
}
