package taskpick_test

import (
	"testing"
	"time"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// TestLeaseSpan: Pick and Extend report the lease's end as a span (expires_after) from when
// the service took the call up, so that a client adding it to its send time stays inside the
// lease whatever the wall clocks say. A Pick that waited for its task reports a span that
// covers the wait (the lease began when the task came, not when the call did) and still ends
// no later than the lease: sent + span <= answered + ttl.
func TestLeaseSpan(t *testing.T) {
	in := startInstance(t, "sqlite", sqliteStore(t)(t), embeddedBus(t))
	p := pool(t, "span")
	const ttl, putAfter = 2 * time.Second, 300 * time.Millisecond
	go func() {
		time.Sleep(putAfter)
		in.client.Put(ctx, &taskpickv1.PutRequest{Pool: p, Tasks: []*taskpickv1.NewTask{task("x")}}) //nolint:errcheck // the Pick fails without it
	}()
	sent := time.Now()
	got := pick(t, in, &taskpickv1.PickRequest{Pool: p, Ttl: sec(ttl), Wait: sec(10 * time.Second)})
	answered := time.Now()
	if len(got) != 1 {
		t.Fatalf("picked %d tasks, want the one put during the wait", len(got))
	}
	lt := got[0]
	if lt.GetExpiresAfter() == nil {
		t.Fatal("Pick answered no expires_after")
	}
	span := lt.GetExpiresAfter().AsDuration()
	if span < ttl+putAfter-100*time.Millisecond {
		t.Errorf("a Pick that waited %v: span %v, want the ttl %v plus the wait", answered.Sub(sent), span, ttl)
	}
	if sent.Add(span).After(answered.Add(ttl)) {
		t.Errorf("span %v ends %v after the lease could have (answered + ttl)", span, sent.Add(span).Sub(answered.Add(ttl)))
	}

	sent = time.Now()
	r, err := in.client.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "x", LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret(), Ttl: sec(4 * time.Second)})
	answered = time.Now()
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if r.GetExpiresAfter() == nil {
		t.Fatal("Extend answered no expires_after")
	}
	if span := r.GetExpiresAfter().AsDuration(); span != 4*time.Second {
		t.Errorf("Extend by 4s: span %v, want 4s from when it was taken up", span)
	}
	if d := r.GetExpiresAt().AsTime().Sub(sent); d > answered.Sub(sent)+4*time.Second || d < 4*time.Second-time.Second {
		t.Errorf("Extend: expires_at %v after the send, want about 4s", d)
	}
}
