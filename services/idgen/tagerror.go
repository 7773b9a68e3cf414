package idgen

import (
	"errors"
	"fmt"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/services/idgen/segment"
)

// tagError is one of the segment engine's errors about a tag in the words a client reads:
// its text names the tag as the request gave it and says what to do, while its code is the
// engine error's own, which server.Error finds through Unwrap.
type tagError struct {
	text string
	err  error
}

func (e *tagError) Error() string { return e.text }
func (e *tagError) Unwrap() error { return e.err }

// namingTag returns err as the client reads it when it is the segment engine's error about
// tag (unknown, existing, below a deleted tag's end), and err unchanged otherwise.
func namingTag(err error, tag string) error {
	var below *segment.BelowTombstone
	switch {
	case errors.Is(err, segment.ErrNotFound):
		return &tagError{fmt.Sprintf("tag: %s does not exist; create it with CreateTag (coord id create-tag)", server.Quote(tag)), err}
	case errors.Is(err, segment.ErrExists):
		return &tagError{fmt.Sprintf("tag: %s already exists", server.Quote(tag)), err}
	case errors.As(err, &below):
		return &tagError{fmt.Sprintf(
			"start: %d is below %d, where the deleted tag %s stopped: IDs below it may have been issued; leave start unset to continue there",
			below.Start, below.MaxID, server.Quote(tag)), err}
	}
	return err
}
