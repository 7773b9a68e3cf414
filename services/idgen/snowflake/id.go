// Package snowflake makes 63-bit time-ordered IDs in the Twitter/bwmarrin layout: 41 bits of
// milliseconds since Epoch, 10 bits of worker id, 12 bits of sequence. The worker id is
// leased from a workerid.Store and renewed, so two live instances never share one; the
// generator stops issuing the moment its lease is lost.
package snowflake

import (
	"errors"
	"fmt"
	"time"
)

// Layout of an ID, from the most significant bit: 1 zero sign bit, TimeBits of milliseconds
// since Epoch, WorkerBits of worker id, SequenceBits of sequence.
const (
	// TimeBits holds milliseconds since Epoch: 2^41 ms is 69.7 years, until 2095-09.
	TimeBits = 41
	// WorkerBits holds the worker id.
	WorkerBits = 10
	// SequenceBits holds the sequence within one worker's millisecond.
	SequenceBits = 12
	// MaxWorker is the highest worker id; a deployment has MaxWorker+1 of them.
	MaxWorker = 1<<WorkerBits - 1
	// MaxSequence is the highest sequence: one worker issues up to 4096 IDs per millisecond.
	MaxSequence = 1<<SequenceBits - 1
	// maxMillis is the last millisecond the layout can hold.
	maxMillis = 1<<TimeBits - 1
)

// Epoch is 2026-01-01T00:00:00Z in Unix milliseconds. It is newer than Twitter's (2010) so
// the 41-bit clock lasts until 2095, and no coordkit snowflake can carry an earlier time,
// which lets Decode reject small numbers (segment or INCR IDs) that are not snowflakes.
const Epoch int64 = 1767225600000

// ErrNotSnowflake means a value cannot be a snowflake ID this layout issued.
var ErrNotSnowflake = errors.New("snowflake: not a snowflake ID")

// ID is a snowflake ID taken apart.
type ID struct {
	// Time is when the ID was issued, to the millisecond.
	Time time.Time
	// Worker is the worker id that issued it.
	Worker int
	// Sequence is its number within that worker's millisecond.
	Sequence int
}

// Compose builds an ID from milliseconds since Epoch, worker id and sequence.
func Compose(ms int64, worker, seq int) int64 {
	return ms<<(WorkerBits+SequenceBits) | int64(worker)<<SequenceBits | int64(seq)
}

// Decode takes id apart. It fails with ErrNotSnowflake for a negative id or one whose time
// is not after Epoch (every number below 2^22 is such), and for one more than a minute in the
// future of now: a snowflake cannot be issued later than the clock that reads it, beyond skew.
func Decode(id int64, now time.Time) (ID, error) {
	ms := id >> (WorkerBits + SequenceBits)
	if id <= 0 || ms == 0 {
		return ID{}, fmt.Errorf("%w: %d carries no time after the epoch (2026-01-01)", ErrNotSnowflake, id)
	}
	t := time.UnixMilli(Epoch + ms).UTC()
	if t.After(now.Add(time.Minute)) {
		return ID{}, fmt.Errorf("%w: %d would be issued at %s, in the future", ErrNotSnowflake, id, t.Format(time.RFC3339))
	}
	return ID{
		Time:     t,
		Worker:   int(id >> SequenceBits & MaxWorker),
		Sequence: int(id & MaxSequence),
	}, nil
}
