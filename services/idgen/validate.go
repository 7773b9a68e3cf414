package idgen

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/server"
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
		return server.InvalidField("tag", "%s is too long: the limit is %d bytes", server.Quote(tag), MaxTagBytes)
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
		return p, server.InvalidField("mode", "must be set (%s)", modeNames)
	default:
		return p, server.InvalidField("mode", "%d is not a known mode (%s)", int32(p.mode), modeNames)
	}
	if req.GetCount() < 1 || req.GetCount() > MaxCount {
		return p, server.InvalidField("count", "%d is outside [1, %d]", req.GetCount(), MaxCount)
	}
	return p, nil
}

// modeNames lists the modes a request may choose.
const modeNames = "MODE_UUID_V4, MODE_UUID_V7, MODE_SNOWFLAKE, MODE_SEGMENT or MODE_REDIS_INCR"

// maxDecimalDigits is the length of the longest decimal int64 (19 digits).
const maxDecimalDigits = 19

// parseDecode validates a Decode request's id: a decimal 63-bit integer, which only snowflake
// IDs are worth decoding. A long id is refused before it is parsed or quoted whole.
func parseDecode(req *idgenv1.DecodeRequest) (int64, error) {
	s := req.GetId()
	switch {
	case s == "":
		return 0, server.InvalidField("id", "must not be empty: pass a snowflake ID as a decimal string")
	case len(s) > maxDecimalDigits:
		return 0, server.InvalidField("id", "%s is too long: a snowflake ID has at most %d decimal digits", server.Quote(s), maxDecimalDigits)
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 0 {
		return 0, server.InvalidField("id", "%s is not a snowflake ID: want a decimal 63-bit integer", server.Quote(s))
	}
	return id, nil
}

// tagParams is a validated CreateTag request with defaults applied.
type tagParams struct {
	tag, description string
	start, step      int64
}

// parseCreateTag validates a CreateTag request: unset step means segment.DefaultStep; unset
// start stays 0, which the engine reads as 1, or where a deleted tag of the name stopped.
func parseCreateTag(req *idgenv1.CreateTagRequest) (tagParams, error) {
	p := tagParams{tag: req.GetTag(), description: req.GetDescription(), start: req.GetStart(), step: req.GetStep()}
	if err := validateTag(p.tag); err != nil {
		return p, err
	}
	if p.start < 0 || p.start > segment.MaxStart {
		return p, server.InvalidField("start", "%d is outside [1, 2^62]", req.GetStart())
	}
	if p.step == 0 {
		p.step = segment.DefaultStep
	}
	if err := validateStep(p.step); err != nil {
		return p, err
	}
	return p, validateDescription(p.description)
}

// updateParams is a validated UpdateTag request; nil fields stay as they are.
type updateParams struct {
	tag         string
	step        *int64
	description *string
}

// parseUpdateTag validates an UpdateTag request, which must change something.
func parseUpdateTag(req *idgenv1.UpdateTagRequest) (updateParams, error) {
	p := updateParams{tag: req.GetTag(), step: req.Step, description: req.Description}
	if err := validateTag(p.tag); err != nil {
		return p, err
	}
	if p.step == nil && p.description == nil {
		return p, server.InvalidField("step", "nothing to update: set step, description or both")
	}
	if p.step != nil {
		if err := validateStep(*p.step); err != nil {
			return p, err
		}
	}
	if p.description != nil {
		return p, validateDescription(*p.description)
	}
	return p, nil
}

func validateStep(step int64) error {
	if step < 1 || step > MaxStep {
		return server.InvalidField("step", "%d is outside [1, %d]", step, MaxStep)
	}
	return nil
}

// validateDescription accepts up to MaxDescriptionBytes of valid UTF-8 without NUL, which
// PostgreSQL's TEXT cannot hold: a description is valid on every store or on none.
func validateDescription(d string) error {
	switch {
	case len(d) > MaxDescriptionBytes:
		return server.InvalidField("description", "is %d bytes, the limit is %d", len(d), MaxDescriptionBytes)
	case !utf8.ValidString(d):
		return server.InvalidField("description", "must be valid UTF-8")
	case strings.IndexByte(d, 0) >= 0:
		return server.InvalidField("description", "must not contain NUL")
	}
	return nil
}
