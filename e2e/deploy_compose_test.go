package e2e

// deploy/compose.yaml and deploy/compose.embedded.yaml, checked without a container engine
// through compose's own loader (compose-go: the schema, interpolation and normalization
// `docker compose` applies). Each test says which deployment mistake it catches.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
	"github.com/go-sql-driver/mysql"
)

// composeStacks are the compose files a user runs, each with the services its plain
// `docker compose -f deploy/FILE up -d` starts.
var composeStacks = []struct {
	file     string
	services []string
}{
	{"compose.yaml", []string{"coord-1", "coord-2", "mysql", "nats", "postgres", "redis", "redlock-1", "redlock-2", "redlock-3", "zookeeper"}},
	{"compose.embedded.yaml", []string{"coord"}},
}

// composeFullStack is the production-shaped stack: several coord instances over real engines.
const composeFullStack = "compose.yaml"

// coordImageRepo is the repository the coord image is tagged as; a service running it is a coord.
const coordImageRepo = "coordkit/coord"

// coordkitEnvPrefix starts every variable coord reads (libs/config.EnvPrefix).
const coordkitEnvPrefix = "COORDKIT_"

// composeLoad loads deploy/FILE as `docker compose -f deploy/FILE up` reads it, interpolating
// from env only (not the test's environment: a user's shell may have nothing set).
func composeLoad(t testing.TB, file string, env map[string]string) *types.Project {
	t.Helper()
	path := filepath.Join(repoRoot(), "deploy", file)
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := composeLoadDoc(filepath.Dir(path), file, content, env)
	if err != nil {
		t.Fatalf("deploy/%s does not load as docker compose would: %v", file, err)
	}
	return p
}

// composeLoadDoc loads one compose document found in dir.
func composeLoadDoc(dir, name string, content []byte, env map[string]string) (*types.Project, error) {
	if env == nil {
		env = map[string]string{}
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, name), Content: content}},
		Environment: env,
	})
}

// composeServices returns the project's services sorted by name, profiled ones included, so
// that a check covers what any `up` could start.
func composeServices(p *types.Project) []types.ServiceConfig {
	all := maps.Clone(p.Services)
	maps.Copy(all, p.DisabledServices)
	var out []types.ServiceConfig
	for _, name := range slices.Sorted(maps.Keys(all)) {
		s := all[name]
		s.Name = name
		out = append(out, s)
	}
	return out
}

// composeImageRepo is an image's repository as Docker shows it ("redis", "coordkit/coord"), "" when
// the reference does not parse.
func composeImageRepo(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ""
	}
	return reference.FamiliarName(named)
}

func composeIsCoord(s types.ServiceConfig) bool { return composeImageRepo(s.Image) == coordImageRepo }

// composeEnv is the environment compose gives a service's container; a variable listed
// without a value and not set for the interpolation is not passed at all.
func composeEnv(s types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// composeCoordEnv is what a coord container runs with: the image's ENV, overridden by compose's.
func composeCoordEnv(t testing.TB, s types.ServiceConfig) map[string]string {
	env := dockerfileRead(t).final().env()
	maps.Copy(env, composeEnv(s))
	return env
}

// serviceNetworks are the networks a service joins: "default" when it names none.
func serviceNetworks(s types.ServiceConfig) []string {
	if len(s.Networks) == 0 && s.NetworkMode == "" {
		return []string{"default"}
	}
	return slices.Sorted(maps.Keys(s.Networks))
}

// TestComposeValid: both files load through compose's own loader (schema, interpolation,
// normalization), with and without the user's MYSQL_PASSWORD, start exactly the expected
// services on a plain `up` (nothing hidden behind a profile), build coord from the repository
// root with deploy/Dockerfile, and interpolate no variable without a default.
func TestComposeValid(t *testing.T) {
	t.Parallel()
	projects := map[string]string{}
	for _, st := range composeStacks {
		t.Run(st.file, func(t *testing.T) {
			for _, env := range []map[string]string{nil, {"MYSQL_PASSWORD": "fromTheShell42"}} {
				p := composeLoad(t, st.file, env)
				if got := p.ServiceNames(); !slices.Equal(got, st.services) {
					t.Errorf("deploy/%s (env %v) starts services %v, want %v", st.file, env, got, st.services)
				}
				if names := p.DisabledServiceNames(); len(names) > 0 {
					t.Errorf("deploy/%s: services %v sit behind a profile; a plain `up` must start the whole stack", st.file, names)
				}
				projects[st.file] = p.Name
			}
			p := composeLoad(t, st.file, nil)
			for _, s := range composeServices(p) {
				if !composeIsCoord(s) {
					continue
				}
				if s.Build == nil {
					t.Errorf("%s: no build section; `up` would pull %s instead of building this checkout", s.Name, s.Image)
					continue
				}
				if s.Build.Context != repoRoot() {
					t.Errorf("%s: build context %q, want the repository root %q (the Dockerfile copies go.work from it)", s.Name, s.Build.Context, repoRoot())
				}
				df := s.Build.Dockerfile
				if !filepath.IsAbs(df) {
					df = filepath.Join(s.Build.Context, df)
				}
				if want := filepath.Join(repoRoot(), "deploy", "Dockerfile"); df != want {
					t.Errorf("%s: builds %s, want %s", s.Name, df, want)
				}
			}
			raw, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", st.file))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range composeVarRef.FindAllStringSubmatch(string(raw), -1) {
				if m[2] == "" {
					t.Errorf("deploy/%s: ${%s} has no default (${%s:-…}); `up` with nothing set would interpolate it empty", st.file, m[1], m[1])
				}
			}
		})
	}
	if a, b := projects[composeStacks[0].file], projects[composeStacks[1].file]; a == b {
		t.Errorf("both stacks are project %q: their containers and volumes would mix", a)
	}
}

// composeVarRef is a ${VAR} interpolation; group 2 is its default or error clause, if any.
var composeVarRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-?][^}]*)?\}`)

// serveEnvVars are the variables `coord serve` reads, taken black-box from the built binary's
// help, where every flag shows its variable as [$COORDKIT_…].
func serveEnvVars(t testing.TB) map[string]bool {
	t.Helper()
	out, err := exec.Command(coordPath(t), "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("coord serve --help: %v\n%s", err, out)
	}
	vars := map[string]bool{}
	for _, m := range envAnnotation.FindAllSubmatch(out, -1) {
		vars[string(m[1])] = true
	}
	// A changed help format must fail here, not make every variable look unknown.
	for _, v := range []string{"COORDKIT_ADDR", "COORDKIT_REDIS_URL", "COORDKIT_MYSQL_DSN"} {
		if !vars[v] {
			t.Fatalf("coord serve --help does not show [$%s]; has its format changed?\n%s", v, out)
		}
	}
	return vars
}

var envAnnotation = regexp.MustCompile(`\[\$(` + coordkitEnvPrefix + `[A-Z0-9_]+)\]`)

// coordEnvProblems lists every COORDKIT_* variable a service sets that no `coord serve` flag
// reads (coord ignores unknown variables, so a typo silently becomes a default: an instance
// on the embedded store next to one on Redis), and every variable of a coord service that is
// not COORDKIT_* (coord reads nothing else, so it is noise or a leaked secret).
func coordEnvProblems(p *types.Project, serveVars map[string]bool) []string {
	var problems []string
	for _, s := range composeServices(p) {
		for _, k := range slices.Sorted(maps.Keys(s.Environment)) {
			switch {
			case strings.HasPrefix(k, coordkitEnvPrefix) && !serveVars[k]:
				problems = append(problems, fmt.Sprintf("service %s sets %s, which no `coord serve` flag reads", s.Name, k))
			case composeIsCoord(s) && !strings.HasPrefix(k, coordkitEnvPrefix):
				problems = append(problems, fmt.Sprintf("coord service %s sets %s; coord reads only %s* variables", s.Name, k, coordkitEnvPrefix))
			}
		}
	}
	return problems
}

// TestComposeCoordEnvIsRealFlags: every COORDKIT_* variable the stacks and the image set is
// one a real `coord serve` flag reads, and coord services set nothing else. The checker is
// shown to reject a typo.
func TestComposeCoordEnvIsRealFlags(t *testing.T) {
	t.Parallel()
	serveVars := serveEnvVars(t)
	for _, st := range composeStacks {
		t.Run(st.file, func(t *testing.T) {
			for _, problem := range coordEnvProblems(composeLoad(t, st.file, nil), serveVars) {
				t.Error(problem)
			}
		})
	}
	t.Run("Dockerfile", func(t *testing.T) {
		for k := range dockerfileRead(t).final().env() {
			if strings.HasPrefix(k, coordkitEnvPrefix) && !serveVars[k] {
				t.Errorf("deploy/Dockerfile sets ENV %s, which no `coord serve` flag reads", k)
			}
		}
	})
	// The checker itself, on small inline stacks.
	cases := []struct {
		name, env string
		image     string
		want      string // a problem naming this; "" for none
	}{
		{name: "real flags", image: "coordkit/coord:0.1.0", env: "COORDKIT_REDIS_URL: redis://redis:6379\n      COORDKIT_ZK_ADDRS: zk:2181"},
		{name: "typo", image: "coordkit/coord:0.1.0", env: "COORDKIT_REDIS_ULR: redis://redis:6379", want: "COORDKIT_REDIS_ULR"},
		{name: "client flag, not a serve flag", image: "coordkit/coord:0.1.0", env: "COORDKIT_TOKEN: secret-token-value", want: "COORDKIT_TOKEN"},
		{name: "not a coord variable", image: "coordkit/coord:0.1.0", env: "REDIS_URL: redis://redis:6379", want: "REDIS_URL"},
		{name: "typo on another service", image: "redis:7.4.11-alpine", env: "COORDKIT_NATS_URLS: nats://nats:4222", want: "COORDKIT_NATS_URLS"},
		{name: "other service, own variables", image: "mysql:8.4.11", env: "MYSQL_DATABASE: coordkit"},
	}
	for _, c := range cases {
		t.Run("checker/"+c.name, func(t *testing.T) {
			doc := fmt.Sprintf("name: inline\nservices:\n  svc:\n    image: %s\n    environment:\n      %s\n", c.image, c.env)
			p, err := composeLoadDoc(t.TempDir(), "compose.yaml", []byte(doc), nil)
			if err != nil {
				t.Fatalf("inline stack does not load: %v\n%s", err, doc)
			}
			problems := coordEnvProblems(p, serveVars)
			switch {
			case c.want == "" && len(problems) > 0:
				t.Errorf("checker rejects a correct stack: %v", problems)
			case c.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], c.want)):
				t.Errorf("checker's problems %q, want exactly one naming %s", problems, c.want)
			}
		})
	}
}

// TestComposeHealthchecks: every service has a healthcheck (so service_healthy means
// something), every depends_on waits for service_healthy (service_started lets coord open
// its backends while MySQL still initialises), and each coord's healthcheck is exactly the
// image's HEALTHCHECK, on the port coord listens on.
func TestComposeHealthchecks(t *testing.T) {
	t.Parallel()
	imageHC, err := dockerfileRead(t).final().healthcheck()
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range composeStacks {
		t.Run(st.file, func(t *testing.T) {
			p := composeLoad(t, st.file, nil)
			for _, s := range composeServices(p) {
				for _, dep := range slices.Sorted(maps.Keys(s.DependsOn)) {
					if c := s.DependsOn[dep].Condition; c != types.ServiceConditionHealthy {
						t.Errorf("%s: depends_on %s with condition %q, want %s", s.Name, dep, c, types.ServiceConditionHealthy)
					}
				}
				hc := s.HealthCheck
				if hc == nil || hc.Disable || len(hc.Test) == 0 || hc.Test[0] == "NONE" {
					t.Errorf("%s: no healthcheck; depends_on service_healthy on it could never hold", s.Name)
					continue
				}
				if !composeIsCoord(s) {
					continue
				}
				if want := append([]string{"CMD"}, imageHC...); !slices.Equal(hc.Test, want) {
					t.Errorf("%s: healthcheck %q, want the image's HEALTHCHECK %q", s.Name, hc.Test, want)
				}
				env := composeCoordEnv(t, s)
				if hp, lp := mustHealthServerPort(t, imageHC), mustAddrPort(t, env[coordkitEnvPrefix+"ADDR"]); hp != lp {
					t.Errorf("%s: healthcheck asks port %d, coord listens on %d (COORDKIT_ADDR=%s)", s.Name, hp, lp, env[coordkitEnvPrefix+"ADDR"])
				}
			}
		})
	}
}

// mustHealthServerPort is the port of the --server URL of a `coord health` command.
func mustHealthServerPort(t testing.TB, argv []string) int {
	t.Helper()
	port, err := healthServerPort(argv)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// healthServerPort is mustHealthServerPort's error-returning core.
func healthServerPort(argv []string) (int, error) {
	i := slices.Index(argv, "--server")
	if i < 0 || i+1 >= len(argv) {
		return 0, fmt.Errorf("health command %q has no --server URL", argv)
	}
	u, err := url.Parse(argv[i+1])
	if err != nil {
		return 0, fmt.Errorf("health command --server: %w", err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0, fmt.Errorf("health command --server %s names no port", argv[i+1])
	}
	return port, nil
}

// mustAddrPort is the port of a host:port.
func mustAddrPort(t testing.TB, addr string) int {
	t.Helper()
	port, err := addrPortOf(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// addrPortOf is mustAddrPort's error-returning core.
func addrPortOf(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return 0, fmt.Errorf("address %q: %w", addr, err)
	}
	return port, nil
}

// TestComposePorts: only coord instances publish ports, each onto the port coord listens on,
// on the host's loopback unless the instance requires tokens (coord without tokens serves
// anyone who can connect), and the full stack publishes 8080 and 8081.
func TestComposePorts(t *testing.T) {
	t.Parallel()
	for _, st := range composeStacks {
		t.Run(st.file, func(t *testing.T) {
			var published []string
			for _, s := range composeServices(composeLoad(t, st.file, nil)) {
				if !composeIsCoord(s) {
					if len(s.Ports) > 0 {
						t.Errorf("%s publishes ports %v; only coord instances may (the engines stay on the compose network)", s.Name, s.Ports)
					}
					continue
				}
				env := composeCoordEnv(t, s)
				for _, port := range s.Ports {
					published = append(published, port.Published)
					if want := mustAddrPort(t, env[coordkitEnvPrefix+"ADDR"]); int(port.Target) != want {
						t.Errorf("%s publishes container port %d, coord listens on %d", s.Name, port.Target, want)
					}
					if ip := net.ParseIP(port.HostIP); env[coordkitEnvPrefix+"AUTH_TOKENS_FILE"] == "" && (ip == nil || !ip.IsLoopback()) {
						t.Errorf("%s publishes %s:%s without COORDKIT_AUTH_TOKENS_FILE; bind it to 127.0.0.1 until it has tokens", s.Name, port.HostIP, port.Published)
					}
				}
			}
			if st.file == composeFullStack && !slices.Equal(slices.Sorted(slices.Values(published)), []string{"8080", "8081"}) {
				t.Errorf("deploy/%s publishes %v, want 8080 and 8081", st.file, published)
			}
		})
	}
}

// imagePinProblem says why an image reference is not pinned to a release, "" when it is: a
// digest, or a tag of at least major.minor (7.4, 7.4.11-alpine, 2.14.7-alpine3.22). No tag
// means latest, and a bare major (redis:7, redis:7-alpine) moves to a new minor under you.
func imagePinProblem(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return fmt.Sprintf("not an image reference: %v", err)
	}
	if _, ok := named.(reference.Digested); ok {
		return ""
	}
	tagged, ok := named.(reference.Tagged)
	if !ok {
		return "no tag, which means latest"
	}
	if !pinnedTag.MatchString(tagged.Tag()) {
		return fmt.Sprintf("tag %q is not a version of at least major.minor", tagged.Tag())
	}
	return ""
}

var pinnedTag = regexp.MustCompile(`^v?[0-9]+\.[0-9]+([.+_-].*)?$`)

// TestComposePinnedImages: every image is pinned to a release or a digest, so that `up` next
// month runs what was tested; the coord image is tagged with the version it is built as.
func TestComposePinnedImages(t *testing.T) {
	t.Parallel()
	checker := []struct {
		ref    string
		pinned bool
	}{
		{"redis:7.4.11-alpine", true},
		{"redis:7.4", true},
		{"nats:2.14.7-alpine3.22", true},
		{"registry.example.com:5000/team/coord:1.2.3", true},
		{"redis@sha256:" + strings.Repeat("ab", 32), true},
		{"redis", false},
		{"redis:latest", false},
		{"redis:7", false},
		{"redis:7-alpine", false},
		{"nats:alpine", false},
		{"registry.example.com:5000/team/coord", false},
	}
	for _, c := range checker {
		if got := imagePinProblem(c.ref) == ""; got != c.pinned {
			t.Errorf("imagePinProblem(%q) = %q: pinned %v, want %v", c.ref, imagePinProblem(c.ref), got, c.pinned)
		}
	}
	for _, st := range composeStacks {
		t.Run(st.file, func(t *testing.T) {
			for _, s := range composeServices(composeLoad(t, st.file, nil)) {
				if s.Image == "" {
					t.Errorf("%s: no image; compose would name the build after the project, unpinned", s.Name)
					continue
				}
				if problem := imagePinProblem(s.Image); problem != "" {
					t.Errorf("%s: image %s is not pinned: %s", s.Name, s.Image, problem)
				}
				if !composeIsCoord(s) || s.Build == nil {
					continue
				}
				named, _ := reference.ParseNormalizedNamed(s.Image)
				tagged, _ := named.(reference.Tagged)
				if v := s.Build.Args["COORDKIT_VERSION"]; tagged == nil || v == nil || *v != tagged.Tag() {
					t.Errorf("%s: image %s built with COORDKIT_VERSION %v; `coord version` must say the tag", s.Name, s.Image, quotedOrUnset(v))
				}
			}
		})
	}
}

// quotedOrUnset shows an optional compose value (a build arg) in a message.
func quotedOrUnset(s *string) string {
	if s == nil {
		return "(unset)"
	}
	return strconv.Quote(*s)
}

// composeListenPorts are the ports the engines' images listen on as configured here.
var composeListenPorts = map[string]int{"redis": 6379, "nats": 4222, "zookeeper": 2181, "mysql": 3306, "postgres": 5432}

// coordEndpoint is a host:port a coord setting points at.
type coordEndpoint struct {
	setting string // the variable naming it
	host    string
	port    int
}

// coordEndpoints parses every backend address of a coord environment as coord does: URLs
// with net/url, host:port lists, the MySQL DSN with the driver's own parser.
func coordEndpoints(env map[string]string) ([]coordEndpoint, error) {
	var out []coordEndpoint
	add := func(setting, hostport string, defaultPort int) error {
		host, p, err := net.SplitHostPort(hostport)
		if err != nil && defaultPort > 0 {
			host, p, err = hostport, strconv.Itoa(defaultPort), nil
		}
		if err != nil {
			return fmt.Errorf("%s: %q: %w", setting, hostport, err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("%s: %q: port: %w", setting, hostport, err)
		}
		out = append(out, coordEndpoint{setting, host, port})
		return nil
	}
	var errs []error
	if v := env[coordkitEnvPrefix+"REDIS_URL"]; v != "" {
		// redis[s][+sentinel|+cluster]://[user:pass@]h1:port[,h2:port][/db]
		u, err := url.Parse(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("COORDKIT_REDIS_URL: %w", err))
		} else {
			for _, h := range strings.Split(u.Host, ",") {
				errs = append(errs, add("COORDKIT_REDIS_URL", h, 6379))
			}
		}
	}
	if v := env[coordkitEnvPrefix+"REDIS_ADDR"]; v != "" {
		errs = append(errs, add("COORDKIT_REDIS_ADDR", v, 0))
	}
	for _, h := range splitAddrList(env[coordkitEnvPrefix+"REDLOCK_ADDRS"]) {
		errs = append(errs, add("COORDKIT_REDLOCK_ADDRS", h, 0))
	}
	for _, h := range splitAddrList(env[coordkitEnvPrefix+"ZK_ADDRS"]) {
		errs = append(errs, add("COORDKIT_ZK_ADDRS", h, 2181))
	}
	if v := env[coordkitEnvPrefix+"MYSQL_DSN"]; v != "" {
		cfg, err := mysql.ParseDSN(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("COORDKIT_MYSQL_DSN: %w", err))
		case cfg.Net != "tcp":
			errs = append(errs, fmt.Errorf("COORDKIT_MYSQL_DSN: network %q, want tcp(host:port)", cfg.Net))
		default:
			errs = append(errs, add("COORDKIT_MYSQL_DSN", cfg.Addr, 0))
		}
	}
	if v := env[coordkitEnvPrefix+"POSTGRES_URL"]; v != "" {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			errs = append(errs, fmt.Errorf("COORDKIT_POSTGRES_URL: want a postgres:// URL (%v)", err))
		} else {
			errs = append(errs, add("COORDKIT_POSTGRES_URL", u.Host, 5432))
		}
	}
	for _, v := range splitAddrList(env[coordkitEnvPrefix+"NATS_URL"]) {
		u, err := url.Parse(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("COORDKIT_NATS_URL: %w", err))
			continue
		}
		errs = append(errs, add("COORDKIT_NATS_URL", u.Host, 4222))
	}
	return out, errors.Join(errs...)
}

// splitAddrList splits a comma-separated list as coord does, dropping empty items.
func splitAddrList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// TestComposeNamesReachable: every host a coord instance's settings name is a service of the
// stack on a network the instance shares, addressed on the port its image listens on, and
// the instance waits for it to be healthy; the MySQL DSN's and the PostgreSQL URL's
// credentials are the ones the mysql and postgres services are created with, also when the
// user sets MYSQL_PASSWORD and POSTGRES_PASSWORD.
func TestComposeNamesReachable(t *testing.T) {
	t.Parallel()
	for name, env := range map[string]map[string]string{
		"passwords unset": nil,
		"passwords set":   {"MYSQL_PASSWORD": "fromTheShell42", "POSTGRES_PASSWORD": "alsoFromTheShell7"},
	} {
		t.Run(name, func(t *testing.T) { composeCheckReachable(t, composeLoad(t, composeFullStack, env), env) })
	}
}

// composeCheckReachable is TestComposeNamesReachable on one loaded stack.
func composeCheckReachable(t *testing.T, p *types.Project, env map[string]string) {
	for _, c := range composeServices(p) {
		if !composeIsCoord(c) {
			continue
		}
		eps, err := coordEndpoints(composeEnv(c))
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
		if len(eps) == 0 {
			t.Errorf("%s names no backend: it would run on its private embedded store", c.Name)
		}
		for _, ep := range eps {
			s, ok := p.Services[ep.host]
			if !ok {
				t.Errorf("%s: %s names host %q, which is no service of the stack", c.Name, ep.setting, ep.host)
				continue
			}
			if !slices.ContainsFunc(serviceNetworks(c), func(n string) bool { return slices.Contains(serviceNetworks(s), n) }) {
				t.Errorf("%s: %s names %s, which shares no network with it (%v vs %v)", c.Name, ep.setting, ep.host, serviceNetworks(c), serviceNetworks(s))
			}
			if want, ok := composeListenPorts[composeImageRepo(s.Image)]; !ok {
				t.Errorf("%s: %s names %s, whose image %s is not in composeListenPorts", c.Name, ep.setting, ep.host, s.Image)
			} else if ep.port != want {
				t.Errorf("%s: %s names %s:%d; %s listens on %d", c.Name, ep.setting, ep.host, ep.port, composeImageRepo(s.Image), want)
			}
			if d, ok := c.DependsOn[ep.host]; !ok || d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: %s names %s, but it does not depend_on it with condition service_healthy", c.Name, ep.setting, ep.host)
			}
		}
		composeCheckPostgresCredentials(t, p, c, env)
		raw := composeEnv(c)[coordkitEnvPrefix+"MYSQL_DSN"]
		dsn, err := mysql.ParseDSN(raw)
		if raw == "" || err != nil {
			continue // no MySQL, or reported above
		}
		host, _, _ := net.SplitHostPort(dsn.Addr)
		db := composeEnv(p.Services[host])
		if dsn.User != db["MYSQL_USER"] || dsn.Passwd != db["MYSQL_PASSWORD"] || dsn.DBName != db["MYSQL_DATABASE"] {
			t.Errorf("%s: DSN user %q, database %q (password equal: %v) do not match %s's MYSQL_USER %q, MYSQL_DATABASE %q",
				c.Name, dsn.User, dsn.DBName, dsn.Passwd == db["MYSQL_PASSWORD"], host, db["MYSQL_USER"], db["MYSQL_DATABASE"])
		}
		if want := env["MYSQL_PASSWORD"]; want != "" && dsn.Passwd != want {
			t.Errorf("%s: DSN ignores MYSQL_PASSWORD from the environment", c.Name)
		}
	}
}

// composeCheckPostgresCredentials: coord's COORDKIT_POSTGRES_URL logs in as the user, with
// the password, into the database that the postgres service it names is created with.
func composeCheckPostgresCredentials(t *testing.T, p *types.Project, c types.ServiceConfig, env map[string]string) {
	raw := composeEnv(c)[coordkitEnvPrefix+"POSTGRES_URL"]
	u, err := url.Parse(raw)
	if raw == "" || err != nil {
		return // no PostgreSQL, or reported by coordEndpoints
	}
	pw, _ := u.User.Password()
	db := composeEnv(p.Services[u.Hostname()])
	if u.User.Username() != db["POSTGRES_USER"] || pw != db["POSTGRES_PASSWORD"] || strings.TrimPrefix(u.Path, "/") != db["POSTGRES_DB"] {
		t.Errorf("%s: postgres URL user %q, database %q (password equal: %v) do not match %s's POSTGRES_USER %q, POSTGRES_DB %q",
			c.Name, u.User.Username(), strings.TrimPrefix(u.Path, "/"), pw == db["POSTGRES_PASSWORD"], u.Hostname(), db["POSTGRES_USER"], db["POSTGRES_DB"])
	}
	if want := env["POSTGRES_PASSWORD"]; want != "" && pw != want {
		t.Errorf("%s: COORDKIT_POSTGRES_URL ignores POSTGRES_PASSWORD from the environment", c.Name)
	}
}

// TestComposeInstancesShareState: the coord instances of the full stack are configured
// alike and keep all shared state in shared engines: snowflake worker ids leased in MySQL or
// Redis (never each instance's own SQLite file, where both would lease worker id 0 and
// issue the same IDs), default lock and task backends that are not the per-instance sqlite,
// and Redlock over 3 or 5 distinct nodes apart from the main Redis.
func TestComposeInstancesShareState(t *testing.T) {
	t.Parallel()
	p := composeLoad(t, composeFullStack, nil)
	var coords []types.ServiceConfig
	for _, s := range composeServices(p) {
		if composeIsCoord(s) {
			coords = append(coords, s)
		}
	}
	if len(coords) < 2 {
		t.Fatalf("deploy/%s runs %d coord instances, want at least 2", composeFullStack, len(coords))
	}
	env := composeEnv(coords[0])
	for _, c := range coords[1:] {
		if other := composeEnv(c); !maps.Equal(env, other) {
			t.Errorf("%s and %s are configured differently (%v vs %v): they would not share locks", coords[0].Name, c.Name, env, other)
		}
	}
	mysqlSet, pgSet := env[coordkitEnvPrefix+"MYSQL_DSN"] != "", env[coordkitEnvPrefix+"POSTGRES_URL"] != ""
	idStore := env[coordkitEnvPrefix+"ID_STORE"]
	switch {
	case (idStore == "" || idStore == "auto") && mysqlSet && pgSet:
		t.Error("COORDKIT_MYSQL_DSN and COORDKIT_POSTGRES_URL without COORDKIT_ID_STORE: coord refuses to start")
	case idStore == "mysql" && !mysqlSet, idStore == "postgres" && !pgSet, idStore == "sqlite":
		t.Errorf("COORDKIT_ID_STORE=%s: ID segments not in a database both instances share", idStore)
	}
	switch leases := env[coordkitEnvPrefix+"ID_WORKER_LEASES"]; leases {
	case "", "sql":
		if !mysqlSet && !pgSet || idStore == "sqlite" {
			t.Errorf("worker leases %q without a shared SQL ID store are each instance's SQLite file: duplicate snowflake IDs", leases)
		}
	case "redis":
		if env[coordkitEnvPrefix+"REDIS_URL"] == "" && env[coordkitEnvPrefix+"REDIS_ADDR"] == "" {
			t.Error("worker leases in redis without COORDKIT_REDIS_URL")
		}
	default:
		t.Errorf("COORDKIT_ID_WORKER_LEASES=%q is neither sql nor redis", leases)
	}
	for _, k := range []string{"DEFAULT_BACKEND", "TASK_DEFAULT_BACKEND"} {
		if v := env[coordkitEnvPrefix+k]; v == "" || v == "sqlite" {
			t.Errorf("%s%s=%q: set a shared backend explicitly; sqlite is per instance", coordkitEnvPrefix, k, v)
		}
	}
	nodes := splitAddrList(env[coordkitEnvPrefix+"REDLOCK_ADDRS"])
	if n := len(nodes); n != 3 && n != 5 {
		t.Errorf("Redlock over %d nodes %v, want 3 or 5", n, nodes)
	}
	redisURL, _ := url.Parse(env[coordkitEnvPrefix+"REDIS_URL"])
	seen := map[string]bool{}
	for _, n := range nodes {
		host, _, _ := net.SplitHostPort(n)
		if seen[host] {
			t.Errorf("Redlock node %s listed twice: one server would count twice towards a majority", host)
		}
		seen[host] = true
		if redisURL != nil && host == redisURL.Hostname() {
			t.Errorf("Redlock node %s is also the main Redis; Redlock nodes must be independent servers", host)
		}
	}
}

// redisDurabilityProblems lists what a redis-server command line lacks for counters that must
// never go backwards: AOF on, fsync before every answer, no eviction. The last occurrence of
// an option wins, as in Redis.
func redisDurabilityProblems(command []string) []string {
	want := map[string]string{"--appendonly": "yes", "--appendfsync": "always", "--maxmemory-policy": "noeviction"}
	got := map[string]string{}
	for i, arg := range command[:max(len(command)-1, 0)] {
		if strings.HasPrefix(arg, "--") {
			got[arg] = command[i+1]
		}
	}
	var problems []string
	for _, opt := range slices.Sorted(maps.Keys(want)) {
		if got[opt] != want[opt] {
			problems = append(problems, fmt.Sprintf("%s %q, want %q", opt, got[opt], want[opt]))
		}
	}
	return problems
}

// TestComposeRedisDurable: every Redis of the stack (the main one and the Redlock nodes)
// persists with an fsync per write and never evicts, since its fencing-token and INCR
// counters going back would let a stale lock holder's writes win and repeat IDs.
func TestComposeRedisDurable(t *testing.T) {
	t.Parallel()
	checker := []struct {
		command []string
		ok      bool
	}{
		{[]string{"redis-server", "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"}, true},
		{[]string{"redis-server", "--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction"}, false},
		{[]string{"redis-server", "--appendfsync", "always", "--maxmemory-policy", "noeviction"}, false},
		{[]string{"redis-server", "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "allkeys-lru"}, false},
		{[]string{"redis-server", "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction", "--appendonly", "no"}, false},
		{nil, false},
	}
	for _, c := range checker {
		if got := redisDurabilityProblems(c.command); (len(got) == 0) != c.ok {
			t.Errorf("redisDurabilityProblems(%q) = %q, want ok=%v", c.command, got, c.ok)
		}
	}
	redises := 0
	for _, s := range composeServices(composeLoad(t, composeFullStack, nil)) {
		if composeImageRepo(s.Image) != "redis" {
			continue
		}
		redises++
		for _, problem := range redisDurabilityProblems(s.Command) {
			t.Errorf("%s: %s", s.Name, problem)
		}
	}
	if redises < 4 {
		t.Errorf("deploy/%s runs %d Redis servers, want the main one and 3 Redlock nodes", composeFullStack, redises)
	}
}

// postgresDurabilityProblems lists the settings of a postgres command line that would let an
// acknowledged commit (a lock's fencing counter, a segment's max_id) be lost when the host
// goes down: fsync or full_page_writes off, or commits answered before their WAL is flushed.
// Settings come as "-c name=value" or "--name=value", the last one winning, as in postgres.
func postgresDurabilityProblems(command []string) []string {
	got := map[string]string{}
	for i, arg := range command {
		kv := ""
		switch {
		case arg == "-c" && i+1 < len(command):
			kv = command[i+1]
		case strings.HasPrefix(arg, "--") && strings.Contains(arg, "="):
			kv = strings.TrimPrefix(arg, "--")
		}
		if k, v, ok := strings.Cut(kv, "="); ok {
			got[strings.ReplaceAll(strings.ToLower(k), "-", "_")] = strings.ToLower(strings.Trim(v, `'"`))
		}
	}
	var problems []string
	for _, k := range []string{"fsync", "full_page_writes"} {
		if v, ok := got[k]; ok && v != "on" && v != "true" && v != "1" {
			problems = append(problems, fmt.Sprintf("%s=%s, want on", k, v))
		}
	}
	if v, ok := got["synchronous_commit"]; ok && v != "on" && v != "remote_write" && v != "remote_apply" {
		problems = append(problems, fmt.Sprintf("synchronous_commit=%s, want on", v))
	}
	return problems
}

// TestComposePostgresDurable: the stack's PostgreSQL keeps its durable defaults, since its
// fencing counters and ID segments going back would let a stale lock holder's writes win
// and repeat IDs.
func TestComposePostgresDurable(t *testing.T) {
	t.Parallel()
	checker := []struct {
		command []string
		ok      bool
	}{
		{nil, true},
		{[]string{"postgres", "-c", "max_connections=200"}, true},
		{[]string{"postgres", "-c", "fsync=off"}, false},
		{[]string{"postgres", "--synchronous-commit=off"}, false},
		{[]string{"postgres", "-c", "full_page_writes=false"}, false},
		{[]string{"postgres", "-c", "fsync=off", "-c", "fsync=on"}, true},
	}
	for _, c := range checker {
		if got := postgresDurabilityProblems(c.command); (len(got) == 0) != c.ok {
			t.Errorf("postgresDurabilityProblems(%q) = %q, want ok=%v", c.command, got, c.ok)
		}
	}
	n := 0
	for _, s := range composeServices(composeLoad(t, composeFullStack, nil)) {
		if composeImageRepo(s.Image) != "postgres" {
			continue
		}
		n++
		for _, problem := range postgresDurabilityProblems(s.Command) {
			t.Errorf("%s: %s", s.Name, problem)
		}
		if v := composeEnv(s)["PGOPTIONS"] + composeEnv(s)["POSTGRES_INITDB_ARGS"]; strings.Contains(v, "fsync") || strings.Contains(v, "synchronous_commit") {
			t.Errorf("%s: durability settings in its environment (%q); keep the defaults", s.Name, v)
		}
	}
	if n != 1 {
		t.Errorf("deploy/%s runs %d PostgreSQL servers, want 1", composeFullStack, n)
	}
}

// composeDataDirs are where each image keeps state that must outlive its container (nats
// keeps none: no JetStream). coord's is its COORDKIT_DATA_DIR.
var composeDataDirs = map[string][]string{
	"redis":     {"/data"},
	"mysql":     {"/var/lib/mysql"},
	"postgres":  {"/var/lib/postgresql/data"}, // PGDATA of the 17.x images (18 moved it)
	"zookeeper": {"/data", "/datalog"},
	"nats":      nil,
}

// TestComposeStatefulVolumes: every stateful service keeps its data directory on a declared
// named volume of its own (an anonymous volume is gone after `down`, and with it every
// fencing counter; two services on one volume corrupt each other), and coord's volume is
// mounted where COORDKIT_DATA_DIR points.
func TestComposeStatefulVolumes(t *testing.T) {
	t.Parallel()
	for _, st := range composeStacks {
		t.Run(st.file, func(t *testing.T) {
			p := composeLoad(t, st.file, nil)
			owner := map[string]string{}
			for _, s := range composeServices(p) {
				dirs, known := composeDataDirs[composeImageRepo(s.Image)]
				if composeIsCoord(s) {
					dirs, known = []string{composeCoordEnv(t, s)[coordkitEnvPrefix+"DATA_DIR"]}, true
				}
				if !known {
					t.Errorf("%s: image %s is not in composeDataDirs; say where it keeps state", s.Name, s.Image)
				}
				for _, dir := range dirs {
					i := slices.IndexFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == dir })
					if i < 0 || s.Volumes[i].Type != types.VolumeTypeVolume || s.Volumes[i].Source == "" {
						t.Errorf("%s: %s is not on a named volume", s.Name, dir)
					}
				}
				for _, v := range s.Volumes {
					if v.Type != types.VolumeTypeVolume || v.Source == "" {
						continue
					}
					if _, ok := p.Volumes[v.Source]; !ok {
						t.Errorf("%s mounts volume %s, which is not declared", s.Name, v.Source)
					}
					if o, ok := owner[v.Source]; ok {
						t.Errorf("volume %s is mounted by both %s and %s", v.Source, o, s.Name)
					}
					owner[v.Source] = s.Name
				}
			}
		})
	}
}

// composeMinStopGrace is coord's graceful drain on SIGTERM (libs/server's default
// ShutdownTimeout): a stop_grace_period no longer than it lets Docker SIGKILL coord mid-drain.
const composeMinStopGrace = 15 * time.Second

// TestComposeCoordRuns: every coord service runs `serve` (no command or entrypoint replacing
// the image's), listens on every interface of its container (on its loopback it would pass
// its own healthcheck and be unreachable through its published port), comes back when it
// dies, and gets longer than its drain to stop.
func TestComposeCoordRuns(t *testing.T) {
	t.Parallel()
	for _, st := range composeStacks {
		t.Run(st.file, func(t *testing.T) {
			for _, s := range composeServices(composeLoad(t, st.file, nil)) {
				if !composeIsCoord(s) {
					continue
				}
				if len(s.Entrypoint) > 0 {
					t.Errorf("%s: entrypoint %q replaces the image's coord", s.Name, s.Entrypoint)
				}
				if len(s.Command) > 0 && s.Command[0] != "serve" {
					t.Errorf("%s: command %q, want the image's serve (or serve with flags)", s.Name, s.Command)
				}
				if addr := composeCoordEnv(t, s)[coordkitEnvPrefix+"ADDR"]; !listensOnAll(addr) {
					t.Errorf("%s: COORDKIT_ADDR=%s listens on one interface; want 0.0.0.0 or [::]", s.Name, addr)
				}
				if s.Restart == "" || s.Restart == types.RestartPolicyNo {
					t.Errorf("%s: restart %q: a crashed instance would stay down", s.Name, s.Restart)
				}
				if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) <= composeMinStopGrace {
					t.Errorf("%s: stop_grace_period %v, want more than coord's %v drain", s.Name, s.StopGracePeriod, composeMinStopGrace)
				}
			}
		})
	}
}
