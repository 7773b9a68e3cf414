// Package idgen is coordkit's ID service: the Connect handler, the interfaces of the ID
// engines and the wiring that opens them. The engines live in subpackages, one per mechanism:
// snowflake (with worker-id leases from workerid), segment (Meituan Leaf on SQLite or MySQL)
// and redisincr (Redis INCRBY blocks); block is the double buffer the last two share.
package idgen

import (
	"context"

	"github.com/coordkit/coordkit/services/idgen/segment"
)

// Sequence hands out numeric IDs of a tag: n of them, strictly increasing, from one
// reservation where the engine holds enough. segment.Engine and redisincr.Engine implement it.
type Sequence interface {
	Next(ctx context.Context, tag string, n int) ([]int64, error)
}

// Segments is the segment engine: a Sequence whose tags are administered. segment.Engine
// implements it.
type Segments interface {
	Sequence
	// CreateTag creates a tag whose first ID is start (0: 1, or where a deleted tag of the
	// name stopped), with the configured step.
	CreateTag(ctx context.Context, tag string, start, step int64, description string) (segment.TagState, error)
	// Tags lists every tag with this instance's buffer state.
	Tags(ctx context.Context) ([]segment.TagState, error)
	// UpdateTag sets a tag's step and description; nil leaves a field as it is.
	UpdateTag(ctx context.Context, tag string, step *int64, description *string) (segment.TagState, error)
	// DeleteTag deletes a tag, keeping its max_id as a tombstone a re-created tag starts above.
	DeleteTag(ctx context.Context, tag string) (segment.TagState, error)
}

// Snowflake issues snowflake IDs; snowflake.Generator implements it.
type Snowflake interface {
	Next(ctx context.Context, n int) ([]int64, error)
}
