package idgen_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/coordkit/coordkit/services/idgen"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
)

// closingSnowflake is a Snowflake engine that counts its Close calls.
type closingSnowflake struct{ closed atomic.Int32 }

func (s *closingSnowflake) AppendRanges(_ context.Context, dst []snowflake.Range, _ int) ([]snowflake.Range, error) {
	return dst, nil
}

func (s *closingSnowflake) Close() error { s.closed.Add(1); return nil }

// TestServiceCloseLeavesEngines: the service closes no engine; whoever started them
// (idgenservice.Open's Mounted.Close) stops them after it.
func TestServiceCloseLeavesEngines(t *testing.T) {
	t.Parallel()
	gen := &closingSnowflake{}
	svc := idgen.NewService(idgen.Config{Snowflake: gen})
	noErr(t, svc.Close())
	if n := gen.closed.Load(); n != 0 {
		t.Fatalf("Service.Close closed the snowflake engine %d times, want 0: its starter closes it", n)
	}
}
