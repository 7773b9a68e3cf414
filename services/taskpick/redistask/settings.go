package redistask

import (
	"context"
	"strconv"
	"time"

	"github.com/coordkit/coordkit/services/taskpick"
)

// Settings implements taskpick.Backend.
func (b *Backend) Settings(ctx context.Context, pool string) (taskpick.PoolSettings, bool, error) {
	v, err := b.run(ctx, settingsScript, pool)
	if err != nil {
		return taskpick.PoolSettings{}, false, err
	}
	return settingsFrom(v.([]any))
}

// settingsFrom reads settingsScript's reply.
func settingsFrom(vals []any) (taskpick.PoolSettings, bool, error) {
	s := taskpick.PoolSettings{Paused: str(vals[0]) == "1", MaxAttempts: uint32(toInt(vals[1])), MaxLeased: uint32(toInt(vals[7])),
		Burst: uint32(toInt(vals[9]))}
	s.Rate, _ = strconv.ParseFloat(str(vals[8]), 64)
	if ri := toInt(vals[2]); ri > 0 {
		rm, _ := strconv.ParseFloat(str(vals[4]), 64)
		rj, _ := strconv.ParseFloat(str(vals[5]), 64)
		s.Retry = &taskpick.RetryPolicy{Initial: time.Duration(ri) * time.Millisecond,
			Max: time.Duration(toInt(vals[3])) * time.Millisecond, Multiplier: rm, Jitter: rj}
	}
	return s, toInt(vals[6]) == 1, nil
}

// SetSettings implements taskpick.Backend: one script replaces the fields.
func (b *Backend) SetSettings(ctx context.Context, pool string, s taskpick.PoolSettings) (taskpick.PoolSettings, error) {
	args := []any{s.MaxAttempts, "", "", "", ""}
	if r := s.Retry; r != nil {
		args = []any{s.MaxAttempts, r.Initial.Milliseconds(), r.Max.Milliseconds(),
			strconv.FormatFloat(r.Multiplier, 'g', -1, 64), strconv.FormatFloat(r.Jitter, 'g', -1, 64)}
	}
	args = append(args, s.MaxLeased, strconv.FormatFloat(s.Rate, 'g', -1, 64), s.Burst)
	v, err := b.run(ctx, setSettingsScript, pool, args...)
	if err != nil {
		return taskpick.PoolSettings{}, err
	}
	out, _, err := settingsFrom(v.([]any))
	return out, err
}

// SetPaused implements taskpick.Backend.
func (b *Backend) SetPaused(ctx context.Context, pool string, paused bool) error {
	flag := 0
	if paused {
		flag = 1
	}
	_, err := b.run(ctx, pauseScript, pool, flag)
	return err
}

// Cancel implements taskpick.Backend.
func (b *Backend) Cancel(ctx context.Context, pool, id string) error {
	v, err := b.run(ctx, cancelScript, pool, id, b.cfg.Retention.Milliseconds())
	if err != nil {
		return err
	}
	vals := v.([]any)
	switch toInt(vals[0]) {
	case 0:
		return taskpick.ErrNotFound
	case 2:
		return taskpick.ErrCancelLeased
	case 3:
		return taskpick.ErrCancelDead
	case 4:
		return taskpick.ErrCancelDone
	}
	return b.register(ctx, pool, toInt(vals[1]))
}
