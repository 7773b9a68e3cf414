package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// benchTable is one block of a benchmark's output: a table and the lines under it (ratios to
// the peer, one-line measurements). Every coordbench command builds its tables once and
// prints them as aligned text on a terminal or, in the report of `coordbench all`, as
// Markdown, so the two cannot drift apart.
type benchTable struct {
	header []string   // empty: no table, only notes
	rows   [][]string // each as long as header; the first column is a name, the others numbers
	notes  []string
}

// writeText prints t as a terminal table: the first column aligned left, the others right,
// two spaces apart, then the notes, one per line.
func (t benchTable) writeText(w io.Writer) error {
	if len(t.header) > 0 {
		// tabwriter aligns every column right; padding the names to one width keeps them left.
		width := 0
		for _, row := range append([][]string{t.header}, t.rows...) {
			width = max(width, len(row[0]))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, row := range append([][]string{t.header}, t.rows...) {
			fmt.Fprintf(tw, "%-*s\t%s\t\n", width, row[0], strings.Join(row[1:], "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range t.notes {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

// writeMarkdown prints t as a GitHub-flavoured Markdown table (numbers aligned right) and
// its notes as a list, separated by a blank line.
func (t benchTable) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	if len(t.header) > 0 {
		mdRow(&b, t.header)
		align := make([]string, len(t.header))
		for i := range align {
			align[i] = "---:"
		}
		align[0] = ":---"
		mdRow(&b, align)
		for _, row := range t.rows {
			mdRow(&b, row)
		}
	}
	if len(t.header) > 0 && len(t.notes) > 0 {
		b.WriteString("\n")
	}
	for _, n := range t.notes {
		fmt.Fprintf(&b, "- %s\n", mdEscape(n))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdRow writes one Markdown table row.
func mdRow(b *strings.Builder, cells []string) {
	b.WriteString("|")
	for _, c := range cells {
		fmt.Fprintf(b, " %s |", mdEscape(c))
	}
	b.WriteString("\n")
}

// mdEscape keeps a cell or note from being read as Markdown: a pipe would end the cell,
// and names like coordkit/uuid-v7 and ratios like a ÷ b are otherwise plain text.
func mdEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "|", `\|`, "*", `\*`, "_", `\_`, "`", "\\`", "<", "&lt;").Replace(s)
}

// writeTables prints tables as text, a blank line between two of them.
func writeTables(w io.Writer, tables ...benchTable) error {
	for i, t := range tables {
		if i > 0 {
			if _, err := fmt.Fprintln(w); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
		}
		if err := t.writeText(w); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	return nil
}

// writeMarkdownTables prints tables as Markdown, a blank line between two of them.
func writeMarkdownTables(w io.Writer, tables ...benchTable) error {
	for i, t := range tables {
		if i > 0 {
			if _, err := fmt.Fprintln(w); err != nil {
				return err
			}
		}
		if err := t.writeMarkdown(w); err != nil {
			return err
		}
	}
	return nil
}
