package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// cliDocPath is the CLI reference; everything below cliDocMarker is rendered from the cobra
// tree by TestCLIDoc, everything above it is written by hand.
const (
	cliDocPath   = "../../docs/cli.md"
	cliDocMarker = "<!-- Generated from the cobra tree by TestCLIDoc in cmd/coord; do not edit below this line. COORDKIT_UPDATE_DOCS=1 go test -run TestCLIDoc . rewrites it. -->"
)

// TestCLIDoc fails when the generated reference in docs/cli.md differs from what the command
// tree says (a flag, default, help text or command added, changed or removed), and prints the
// first differing lines. With COORDKIT_UPDATE_DOCS=1 it rewrites the reference instead.
func TestCLIDoc(t *testing.T) {
	raw, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, cliDocMarker)
	if i < 0 {
		t.Fatalf("%s has no marker line %q", cliDocPath, cliDocMarker)
	}
	want := doc[:i] + cliDocMarker + "\n\n" + renderCLIReference(newRootCmd(nil, nil, nil))
	if want == doc {
		return
	}
	if os.Getenv("COORDKIT_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(cliDocPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", cliDocPath)
		return
	}
	t.Fatalf("%s is stale; run COORDKIT_UPDATE_DOCS=1 go test -run TestCLIDoc . in cmd/coord\n%s",
		cliDocPath, lineDiff(doc, want))
}

// renderCLIReference renders every command of the tree under root, depth first in the order
// help lists them: its synopsis, usage line and own flags (inherited ones are listed under the
// command that defines them).
func renderCLIReference(root *cobra.Command) string {
	root.InitDefaultCompletionCmd()
	var b strings.Builder
	b.WriteString("## Reference\n\n")
	b.WriteString("Every command and flag of `coord`, as `coord … --help` prints them. A flag's own\n")
	b.WriteString("environment variable is in brackets; a subcommand also takes the flags of the\n")
	b.WriteString("commands above it.\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		fmt.Fprintf(&b, "\n### `%s`\n\n", c.CommandPath())
		if s := strings.TrimSpace(c.Short); s != "" {
			fmt.Fprintf(&b, "%s\n\n", s)
		}
		fmt.Fprintf(&b, "```\n%s\n```\n", c.UseLine())
		if c.Runnable() && c.HasAvailableSubCommands() || !c.Runnable() {
			var subs []string
			for _, s := range c.Commands() {
				if s.IsAvailableCommand() && s.Name() != "help" {
					subs = append(subs, "`"+s.Name()+"`")
				}
			}
			if len(subs) > 0 {
				fmt.Fprintf(&b, "\nCommands: %s.\n", strings.Join(subs, ", "))
			}
		}
		if rows := flagRows(c.LocalFlags()); rows != "" {
			b.WriteString("\n| flag | default | meaning |\n| --- | --- | --- |\n")
			b.WriteString(rows)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return b.String()
}

// flagRows renders the visible flags of fs as Markdown table rows, sorted by name.
func flagRows(fs *pflag.FlagSet) string {
	var rows []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name, usage := pflag.UnquoteUsage(f)
		flag := "`--" + f.Name
		if name != "" {
			flag += " " + name
		}
		flag += "`"
		if f.Shorthand != "" {
			flag = "`-" + f.Shorthand + "`, " + flag
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "[]" && !(f.Value.Type() == "bool" && f.DefValue == "false") {
			def = "`" + f.DefValue + "`"
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s |\n", flag, mdCell(def), mdCell(usage)))
	})
	sort.Strings(rows)
	return strings.Join(rows, "")
}

var cellBreak = regexp.MustCompile(`\s*\n\s*`)

// mdCell makes s safe inside one Markdown table cell: one line, no column break, no HTML.
func mdCell(s string) string {
	s = cellBreak.ReplaceAllString(s, " ")
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

// lineDiff shows where got and want first differ, with a few lines of each from there.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	end := func(s []string) []string { return s[i:min(len(s), i+8)] }
	return fmt.Sprintf("first difference at line %d\n--- docs/cli.md\n%s\n+++ generated\n%s",
		i+1, strings.Join(end(g), "\n"), strings.Join(end(w), "\n"))
}

// TestDocLinks: every relative link in README.md and docs/*.md names a file that exists, and
// an anchor in it names a heading of that Markdown file.
func TestDocLinks(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := stripFences(string(raw))
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: %v", f, target, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				anchors[dest] = headingAnchors(t, dest)
			}
			if !anchors[dest][anchor] {
				t.Errorf("%s: link %s: no heading with that anchor in %s", f, target, dest)
			}
		}
	}
}

// stripFences drops fenced code blocks, whose brackets are not links.
func stripFences(s string) string {
	var out []string
	in := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			continue
		}
		if !in {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// headingAnchors returns the anchors GitHub gives the headings of the Markdown file at path.
func headingAnchors(t *testing.T, path string) map[string]bool {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range strings.Split(stripFences(string(raw)), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
