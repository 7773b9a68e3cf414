package redistask

import (
	"context"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
)

// TestClusterSchedulesHostileNames runs every schedule operation and a fire on a
// three-master cluster with hostile pool and schedule names: a schedule's keys, its pool's
// keys and the task a fire puts must share a slot.
func TestClusterSchedulesHostileNames(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 3, Password: "pw"})
	a, b := openOn(t, cluster.URL(), DefaultPrefix), openOn(t, cluster.URL(), DefaultPrefix)
	ctx := context.Background()
	due := time.UnixMilli(time.Now().UnixMilli())
	for _, pool := range hostileNames[:8] {
		for _, name := range hostileNames[:8] {
			if _, _, err := a.PutSchedule(ctx, taskpick.Schedule{Pool: pool, Name: name, Spec: "@every 1s", Timezone: "UTC",
				Payload: []byte(name), MaxAttempts: 1, Missed: taskpick.MissedSkip, NextFire: due}); err != nil {
				t.Fatalf("PutSchedule(%q, %q): %v", pool, name, err)
			}
		}
		if list, err := b.ListSchedules(ctx, pool, "", 100); err != nil || len(list) != 8 {
			t.Fatalf("ListSchedules(%q) = %d, %v; want 8", pool, len(list), err)
		}
		if _, err := b.PauseSchedule(ctx, pool, hostileNames[0]); err != nil {
			t.Fatalf("PauseSchedule(%q): %v", pool, err)
		}
		if _, err := b.ResumeSchedule(ctx, pool, hostileNames[0], func(taskpick.Schedule) time.Time { return due }); err != nil {
			t.Fatalf("ResumeSchedule(%q): %v", pool, err)
		}
	}
	fired := 0
	for fired < 64 {
		f, err := b.FireDue(ctx, due, 100, func(s taskpick.Schedule) taskpick.Fire {
			return taskpick.Fire{Fired: s.NextFire, Next: s.NextFire.Add(time.Hour), Task: &taskpick.NewTask{ID: s.Name + "@tick", Payload: s.Payload, MaxAttempts: 1}}
		})
		if err != nil || len(f) == 0 {
			t.Fatalf("FireDue: %d fired, %v; want all 64 in the end, %d so far", len(f), err, fired)
		}
		fired += len(f)
	}
	for _, pool := range hostileNames[:8] {
		if st, err := a.Stats(ctx, pool); err != nil || st.Available != 8 {
			t.Fatalf("Stats(%q) = %+v, %v; want the 8 fired tasks", pool, st, err)
		}
		for _, name := range hostileNames[:8] {
			if err := a.DeleteSchedule(ctx, pool, name); err != nil {
				t.Fatalf("DeleteSchedule(%q, %q): %v", pool, name, err)
			}
		}
	}
	if n, err := a.rdb.HLen(ctx, a.schedPoolsKey()).Result(); err != nil || n != 0 {
		t.Fatalf("pools with schedules after every delete: %d, %v; want none", n, err)
	}
}
