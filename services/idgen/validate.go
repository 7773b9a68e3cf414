package idgen

import (
	"unicode"
	"unicode/utf8"

	"github.com/coordkit/coordkit/libs/server"
	idgenv1 "github.com/coordkit/coordkit/proto/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/services/idgen/block"
	"github.com/coordkit/coordkit/services/idgen/segment"
)

// Limits on requests, checked at the edge before any engine is touched.
const (
	// MaxCount is the largest batch one Next call may ask for.
	MaxCount = 10000
	// MaxTagBytes is the longest tag, in bytes: it is a primary key and part of a Redis key.
	MaxTagBytes = 128
	// MaxDescriptionBytes is the longest tag description, in bytes.
	MaxDescriptionBytes = 256
	// MaxStep is the largest configured step of a segment tag.
	MaxStep = block.MaxStep
)

// validateTag accepts 1 to MaxTagBytes bytes of valid UTF-8 without control characters:
// any script, spaces, dots and colons are fine, but a NUL or a newline in a key that ends up
// in logs, Redis keys and CLI output only causes trouble.
func validateTag(tag string) error {
	switch {
	case tag == "":
		return server.InvalidField("tag", "must not be empty")
	case len(tag) > MaxTagBytes:
		return server.InvalidField("tag", "is %d bytes, the limit is %d", len(tag), MaxTagBytes)
	case !utf8.ValidString(tag):
		return server.InvalidField("tag", "must be valid UTF-8")
	}
	for _, r := range tag {
		if unicode.IsControl(r) {
			return server.InvalidField("tag", "must not contain control characters (found %U)", r)
		}
	}
	return nil
}

// nextParams is a validated Next request.
type nextParams struct {
	mode  idgenv1.Mode
	tag   string
	count int
}

// parseNext validates a Next request without touching any engine.
func parseNext(req *idgenv1.NextRequest) (nextParams, error) {
	p := nextParams{mode: req.GetMode(), tag: req.GetTag(), count: int(req.GetCount())}
	switch p.mode {
	case idgenv1.Mode_MODE_UUID_V4, idgenv1.Mode_MODE_UUID_V7, idgenv1.Mode_MODE_SNOWFLAKE:
		if p.tag != "" {
			return p, server.InvalidField("tag", "must be empty for %s: only MODE_SEGMENT and MODE_REDIS_INCR have tags", p.mode)
		}
	case idgenv1.Mode_MODE_SEGMENT, idgenv1.Mode_MODE_REDIS_INCR:
		if err := validateTag(p.tag); err != nil {
			return p, err
		}
	case idgenv1.Mode_MODE_UNSPECIFIED:
		return p, server.InvalidField("mode", "must be set (MODE_UUID_V4, MODE_UUID_V7, MODE_SNOWFLAKE, MODE_SEGMENT or MODE_REDIS_INCR)")
	default:
		return p, server.InvalidField("mode", "%d is not a known mode", int32(p.mode))
	}
	if req.GetCount() < 1 || req.GetCount() > MaxCount {
		return p, server.InvalidField("count", "%d is outside [1, %d]", req.GetCount(), MaxCount)
	}
	return p, nil
}

// tagParams is a validated CreateTag request with defaults applied.
type tagParams struct {
	tag, description string
	start, step      int64
}

// parseCreateTag validates a CreateTag request: unset start means 1, unset step
// segment.DefaultStep.
func parseCreateTag(req *idgenv1.CreateTagRequest) (tagParams, error) {
	p := tagParams{tag: req.GetTag(), description: req.GetDescription(), start: req.GetStart(), step: req.GetStep()}
	if err := validateTag(p.tag); err != nil {
		return p, err
	}
	if p.start == 0 {
		p.start = 1
	}
	if p.start < 0 || p.start > segment.MaxStart {
		return p, server.InvalidField("start", "%d is outside [1, 2^62]", req.GetStart())
	}
	if p.step == 0 {
		p.step = segment.DefaultStep
	}
	if p.step < 1 || p.step > MaxStep {
		return p, server.InvalidField("step", "%d is outside [1, %d]", req.GetStep(), MaxStep)
	}
	if len(p.description) > MaxDescriptionBytes {
		return p, server.InvalidField("description", "is %d bytes, the limit is %d", len(p.description), MaxDescriptionBytes)
	}
	if !utf8.ValidString(p.description) {
		return p, server.InvalidField("description", "must be valid UTF-8")
	}
	return p, nil
}
