// Package redisincr hands out IDs from a Redis counter per tag: `INCRBY <prefix>tag:<tag>
// block` reserves a block atomically across every instance, and the block is handed out from
// memory with the double buffer of package block, refilled in the background.
//
// A tag starts at 1 on first use; there is nothing to create. The counter is the only record
// of what was issued: run Redis with persistence (appendonly yes, appendfsync everysec or
// always) or a restart that loses it issues the same IDs again.
package redisincr

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/services/idgen/block"
)

// ErrUnavailable means Redis could not be reached or did not answer.
// It wraps server.ErrUnavailable, which every service answers as unavailable.
var ErrUnavailable = fmt.Errorf("redisincr: redis %w", server.ErrUnavailable)

// DefaultBlock is the block size when Config.Block is 0.
const DefaultBlock = 1000

// Config configures an Engine.
type Config struct {
	// Prefix starts every key; default "coordkit:idgen:".
	Prefix string
	// Block is how many IDs one INCRBY reserves; default DefaultBlock. A batch larger than
	// what is buffered reserves the whole remainder in one INCRBY instead.
	Block int64
	// Logger logs failed background reservations; default slog.Default().
	Logger *slog.Logger
}

// Engine hands out Redis INCR IDs. It is safe for concurrent use.
type Engine struct {
	pool *block.Pool
}

// New returns an engine on rdb; the caller keeps ownership of rdb.
func New(rdb redis.UniversalClient, cfg Config) *Engine {
	if cfg.Prefix == "" {
		cfg.Prefix = "coordkit:idgen:"
	}
	if cfg.Block <= 0 {
		cfg.Block = DefaultBlock
	}
	r := reserver{rdb: rdb, prefix: cfg.Prefix + "tag:", block: cfg.Block}
	return &Engine{pool: block.NewPool(block.Config{Reserver: r, Policy: block.Fixed, Logger: cfg.Logger, Name: "redisincr"})}
}

// Next returns n strictly increasing IDs of tag.
func (e *Engine) Next(ctx context.Context, tag string, n int) ([]int64, error) {
	return e.pool.Next(ctx, tag, n)
}

// AppendRanges is Next appending the IDs to dst as ranges of consecutive IDs.
func (e *Engine) AppendRanges(ctx context.Context, dst []block.Range, tag string, n int) ([]block.Range, error) {
	return e.pool.AppendRanges(ctx, dst, tag, n)
}

// Close stops background reservations; the client belongs to the caller.
func (e *Engine) Close() error {
	e.pool.Close()
	return nil
}

// reserver implements block.Reserver with INCRBY.
type reserver struct {
	rdb    redis.UniversalClient
	prefix string
	block  int64
}

// Reserve implements block.Reserver: INCRBY returns the new top, so the block is
// [top - size + 1, top].
func (r reserver) Reserve(ctx context.Context, tag string, want int64) (block.Reservation, error) {
	size := max(want, r.block)
	top, err := r.rdb.IncrBy(ctx, r.prefix+tag, size).Result()
	if err != nil {
		return block.Reservation{}, server.Unavailable(ctx, ErrUnavailable, "redis", err)
	}
	return block.Reservation{Range: block.Range{Start: top - size + 1, End: top + 1}, MinStep: r.block}, nil
}
