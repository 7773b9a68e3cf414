package zklock

import (
	"context"
	"fmt"
	"testing"
)

// readLine reads key's line, first node first.
func readLine(t *testing.T, b *Backend, key string) []*entry {
	t.Helper()
	ctx := context.Background()
	for {
		line, _, err := b.children(ctx, b.parentPath(key))
		if err != nil {
			t.Errorf("read line of %q: %v", key, err)
			return nil
		}
		out := make([]*entry, 0, len(line))
		for _, c := range line {
			e, err := b.read(ctx, b.parentPath(key)+"/"+c.name)
			if moved(err) {
				break
			}
			if err != nil {
				t.Errorf("read %s: %v", c.name, err)
				return nil
			}
			out = append(out, e)
		}
		if len(out) == len(line) {
			return out
		}
	}
}

func describe(line []*entry) string {
	s := "["
	for i, e := range line {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %+v token %d session %x", e.path[len(e.path)-30:], e.data, e.token(), e.stat.EphemeralOwner)
	}
	return s + "]"
}
