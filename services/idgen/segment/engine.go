package segment

import (
	"context"
	"log/slog"
	"time"

	"github.com/coordkit/coordkit/services/idgen/block"
)

// Limits of a tag's configuration.
const (
	// DefaultStep is the configured step of a tag created without one.
	DefaultStep = 1000
	// MaxStart is the highest first ID: 2^62 leaves 2^62 IDs before int64 overflows, which
	// SQLite would otherwise turn silently into a float.
	MaxStart = 1 << 62
)

// Config configures an Engine.
type Config struct {
	// Clock times reservations for the dynamic step; default time.Now. Tests move it.
	Clock func() time.Time
	// Logger logs failed background reservations; default slog.Default().
	Logger *slog.Logger
}

// Engine hands out segment IDs and administers tags. It is safe for concurrent use.
type Engine struct {
	store *Store
	pool  *block.Pool
}

// New returns an engine on store with Leaf's dynamic step.
func New(store *Store, cfg Config) *Engine {
	return &Engine{store: store, pool: block.NewPool(block.Config{
		Reserver: store, Policy: block.Leaf, Clock: cfg.Clock, Logger: cfg.Logger, Name: "segment",
	})}
}

// Next returns n strictly increasing IDs of tag, or ErrNotFound.
func (e *Engine) Next(ctx context.Context, tag string, n int) ([]int64, error) {
	return e.pool.Next(ctx, tag, n)
}

// AppendRanges is Next appending the IDs to dst as ranges of consecutive IDs: the service's
// path, which allocates nothing for a single ID when dst has room.
func (e *Engine) AppendRanges(ctx context.Context, dst []block.Range, tag string, n int) ([]block.Range, error) {
	return e.pool.AppendRanges(ctx, dst, tag, n)
}

// TagState is a tag's row and this instance's buffer for it.
type TagState struct {
	Tag
	// Buffer is this instance's double buffer, when Buffered.
	Buffer block.State
	// Buffered says whether this instance has used the tag.
	Buffered bool
}

// CreateTag creates tag, whose first ID is start, with the configured step. start 0 means 1,
// or for a tag that was deleted, its tombstone's max_id; a start below that max_id is a
// *BelowTombstone (ErrBelowTombstone).
func (e *Engine) CreateTag(ctx context.Context, tag string, start, step int64, description string) (TagState, error) {
	t, err := e.store.Create(ctx, tag, start, step, description)
	if err != nil {
		return TagState{}, err
	}
	return e.withBuffer(t), nil
}

// UpdateTag sets tag's configured step and description; nil leaves a field as it is. The new
// step bounds every reservation from the next one on, by any instance; ranges already
// reserved are handed out as they are.
func (e *Engine) UpdateTag(ctx context.Context, tag string, step *int64, description *string) (TagState, error) {
	t, err := e.store.Update(ctx, tag, step, description)
	if err != nil {
		return TagState{}, err
	}
	return e.withBuffer(t), nil
}

// DeleteTag deletes tag, keeping its max_id as a tombstone, and drops this instance's
// buffered ranges of it, so this instance issues no more IDs of the deleted tag. Other
// instances run out their buffers (IDs below the tombstone) and then get ErrNotFound.
func (e *Engine) DeleteTag(ctx context.Context, tag string) (TagState, error) {
	t, err := e.store.Delete(ctx, tag)
	if err != nil {
		return TagState{}, err
	}
	e.pool.Drop(tag)
	return TagState{Tag: t}, nil
}

func (e *Engine) withBuffer(t Tag) TagState {
	s := TagState{Tag: t}
	s.Buffer, s.Buffered = e.pool.State(t.Tag)
	return s
}

// Tags lists every tag with this instance's buffer state.
func (e *Engine) Tags(ctx context.Context) ([]TagState, error) {
	tags, err := e.store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TagState, len(tags))
	for i, t := range tags {
		out[i] = e.withBuffer(t)
	}
	return out, nil
}

// Close stops background reservations. The database belongs to the caller.
func (e *Engine) Close() error {
	e.pool.Close()
	return nil
}
