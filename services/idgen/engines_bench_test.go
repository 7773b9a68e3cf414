package idgen_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen/block"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
	"github.com/coordkit/coordkit/services/idgen/uuidgen"
)

// The engines' hot paths, one ID per call, for profiling with
//
//	go test ./services/idgen -run '^$' -bench Engine -cpuprofile cpu.out
//
// `coordbench id` measures the same next to bwmarrin/snowflake and google/uuid.

func BenchmarkEngineSegment(b *testing.B) {
	ctx := context.Background()
	db, err := sqldb.OpenSQLite(ctx, filepath.Join(b.TempDir(), "ids.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	store, err := segment.NewStore(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	e := segment.New(store, segment.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer e.Close()
	if _, err := e.CreateTag(ctx, "bench", 1, 1000, ""); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	rs := make([]block.Range, 0, 4)
	for b.Loop() {
		if rs, err = e.AppendRanges(ctx, rs[:0], "bench", 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEngineSnowflake(b *testing.B) {
	worker := 1
	g, err := snowflake.Start(context.Background(), snowflake.Config{WorkerID: &worker})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	b.ReportAllocs()
	rs := make([]snowflake.Range, 0, 4)
	for b.Loop() {
		if rs, err = g.AppendRanges(context.Background(), rs[:0], 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEngineUUIDv7(b *testing.B) {
	g := uuidgen.New(nil)
	b.ReportAllocs()
	for b.Loop() {
		_ = g.V7()
	}
}

func BenchmarkEngineUUIDv4(b *testing.B) {
	g := uuidgen.New(nil)
	b.ReportAllocs()
	for b.Loop() {
		_ = g.V4()
	}
}

func BenchmarkPeerGoogleUUIDv7String(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		u, err := uuid.NewV7()
		if err != nil {
			b.Fatal(err)
		}
		_ = u.String()
	}
}
