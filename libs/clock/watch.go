package clock

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WatchConfig configures a Watcher.
type WatchConfig struct {
	// Source is the clock watched (default System).
	Source Source
	// Interval is how often the clocks are compared (default 1s).
	Interval time.Duration
	// Threshold is how far the wall clock must move against the monotonic clock between two
	// comparisons to count as a step (default 1s). NTP's slewing moves it by at most 0.5ms a
	// second, far below it.
	Threshold time.Duration
	// Logger receives one warning per step (default slog.Default()).
	Logger *slog.Logger
	// Registerer, if set, gets the metrics coordkit_clock_steps_total and
	// coordkit_clock_drift_seconds.
	Registerer prometheus.Registerer
}

// Watcher notices steps of a process's wall clock: it compares the wall clock with the
// monotonic clock now and then, and when the wall clock moved by more than the threshold
// against it since the last comparison, it logs the step once and counts it.
//
// Backends that keep their own clock (Redis's key expiry, MySQL's NOW()) decide when a lease
// ends by that clock, not coordkit's; a step of this process's clock usually means the
// machine's clock was stepped, which may be the backend's machine too. The metrics let an
// operator see it.
type Watcher struct {
	cfg    WatchConfig
	steady *Steady
	steps  prometheus.Counter
	drift  prometheus.Gauge

	mu   sync.Mutex
	last time.Duration // drift at the last comparison
	n    int
}

// NewWatcher returns a Watcher that counts drift from now, and registers its metrics.
func NewWatcher(cfg WatchConfig) (*Watcher, error) {
	if cfg.Source == nil {
		cfg.Source = System
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Threshold <= 0 {
		cfg.Threshold = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watcher{
		cfg:    cfg,
		steady: NewSteady(cfg.Source),
		steps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coordkit_clock_steps_total",
			Help: "Steps of the process's wall clock against its monotonic clock (by more than the threshold, 1s by default, between two checks).",
		}),
		drift: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coordkit_clock_drift_seconds",
			Help: "How far the wall clock has moved against the monotonic clock since the process started (wall − start + monotonic elapsed); 0 while nobody stepped it.",
		}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(w.steps); err != nil {
			return nil, err
		}
		if err := cfg.Registerer.Register(w.drift); err != nil {
			cfg.Registerer.Unregister(w.steps)
			return nil, err
		}
	}
	return w, nil
}

// Check compares the clocks once: it returns the step seen since the last comparison, 0
// when the wall clock moved by no more than the threshold, and updates the metrics.
func (w *Watcher) Check() time.Duration {
	d := w.steady.Drift()
	w.drift.Set(d.Seconds())
	w.mu.Lock()
	step := d - w.last
	w.last = d
	if step < 0 && -step > w.cfg.Threshold || step > w.cfg.Threshold {
		w.n++
	} else {
		step = 0
	}
	w.mu.Unlock()
	if step != 0 {
		w.steps.Inc()
		w.cfg.Logger.Warn("clock: the wall clock was stepped; leases on backends that keep their own clock (redis, redlock, mysql, zookeeper sessions) may end early or late by as much",
			"step", step.String(), "drift_since_start", d.String(), "wall", w.cfg.Source.Wall().UTC().Format(time.RFC3339Nano))
	}
	return step
}

// Steps is how many steps Check has seen.
func (w *Watcher) Steps() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// Run checks every Interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Check()
		}
	}
}

// Watch starts a Watcher in the background and returns the function that stops it and waits
// for it to end.
func Watch(cfg WatchConfig) (stop func(), err error) {
	w, err := NewWatcher(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	return func() { cancel(); <-done }, nil
}
