package snowflake

import (
	"errors"
	"testing"
	"time"
)

func TestComposeDecode(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 10, 0, 0, 123e6, time.UTC)
	ms := now.UnixMilli() - Epoch
	tests := []struct {
		name    string
		id      int64
		want    ID
		wantErr bool
	}{
		{name: "typical", id: Compose(ms, 42, 7), want: ID{Time: now, Worker: 42, Sequence: 7}},
		{name: "max fields", id: Compose(ms, MaxWorker, MaxSequence), want: ID{Time: now, Worker: MaxWorker, Sequence: MaxSequence}},
		{name: "first millisecond", id: Compose(1, 0, 0), want: ID{Time: time.UnixMilli(Epoch + 1).UTC()}},
		{name: "zero", id: 0, wantErr: true},
		{name: "negative", id: -1, wantErr: true},
		{name: "no time bits", id: 1<<22 - 1, wantErr: true},
		{name: "future", id: Compose(ms+int64(2*time.Minute/time.Millisecond), 1, 1), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Decode(tt.id, now)
			if tt.wantErr {
				if !errors.Is(err, ErrNotSnowflake) {
					t.Fatalf("Decode(%d) = %v, %v; want ErrNotSnowflake", tt.id, got, err)
				}
				return
			}
			if err != nil || !got.Time.Equal(tt.want.Time) || got.Worker != tt.want.Worker || got.Sequence != tt.want.Sequence {
				t.Fatalf("Decode(%d) = %+v, %v; want %+v", tt.id, got, err, tt.want)
			}
		})
	}
}
