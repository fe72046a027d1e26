// Package latency keeps a worker's rolling time-to-first-byte and outcome samples per
// connection and per connection + model, the opt-in signal behind p2c target selection.
//
// The guide keeps these samples in memory (connectionLatencyTracker): a Tracker lives in one
// worker VM, never in shared data, so recording an attempt costs no shared-data write. Each
// worker therefore judges from the attempts it dispatched itself.
package latency

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// DefaultMaxTracked bounds how many sample windows (connection, and connection + model) one
// worker keeps. It is far above what a policy with 1,000 connections and a few models each
// needs; past it, stale windows are evicted and, failing that, new keys go untracked.
const DefaultMaxTracked = 8192

// MaxSamplesPerWindow bounds Config.Samples.
const MaxSamplesPerWindow = 256

// maxTTFB clamps a recorded time-to-first-byte; anything longer is as bad as this.
const maxTTFB = time.Hour

// Config sets the window shape.
type Config struct {
	// Samples is how many of the latest attempts each window keeps (guide: 20).
	Samples int
	// Window is how old a sample may be and still count (guide: 15 minutes).
	Window time.Duration
	// MinSamples is how many samples each candidate's window needs before p2c lets
	// latency and errors weigh in (guide: 3; 0 = that default), so a new connection is
	// never penalised.
	MinSamples int
	// MaxTracked bounds the number of windows kept (0 = DefaultMaxTracked). A memory
	// bound of this package, not a policy setting.
	MaxTracked int
}

// ConfigFrom converts the resolved p2c latency settings (policies.Resolved.P2CLatency)
// into a tracker Config: the one conversion from policy settings to the latency signal.
// The weight is the selector's (selection.Config.LatencyWeight).
func ConfigFrom(s policies.P2CLatencySettings) Config {
	return Config{Samples: s.Samples, Window: s.Window, MinSamples: s.MinSamples, MaxTracked: DefaultMaxTracked}
}

// DefaultConfig returns the guide's window (§2; policies.Defaults): the last 20 samples within
// 15 minutes, at least 3 before they count.
func DefaultConfig() Config {
	return ConfigFrom(policies.Defaults().P2CLatency)
}

// Stats summarises one window's samples that are still inside the time window.
type Stats struct {
	// Samples counts attempts in the window, whatever their outcome.
	Samples int
	// Failures counts the failed attempts among them.
	Failures int
	// Timed counts the attempts that reported a time-to-first-byte.
	Timed int
	// MeanTTFB is the mean time-to-first-byte of the timed attempts (0 when Timed is 0).
	MeanTTFB time.Duration
}

// key identifies a window. An empty model is the connection-level window.
type key struct {
	provider, connection, model string
}

type sample struct {
	atNanos    int64 // when the attempt was recorded (Unix nanoseconds)
	ttfbMicros int64 // time to first byte in microseconds; 0 = not timed
	ok         bool  // the attempt succeeded
}

// window is a ring of the latest samples.
type window struct {
	ring  []sample
	next  int // slot the next sample goes to
	count int // filled slots
}

// Tracker records attempts and answers window statistics. It is not safe for concurrent
// use: each worker VM owns one.
type Tracker struct {
	cfg     Config
	windows map[key]*window
	// Dropped counts samples that found no room (every window full and fresh).
	Dropped uint64
}

// NewTracker returns an empty tracker. Out-of-range settings are rejected.
func NewTracker(cfg Config) (*Tracker, error) {
	if cfg.Samples < 1 || cfg.Samples > MaxSamplesPerWindow {
		return nil, fmt.Errorf("latency: samples %d outside 1..%d", cfg.Samples, MaxSamplesPerWindow)
	}
	if cfg.Window <= 0 {
		return nil, fmt.Errorf("latency: window %v must be positive", cfg.Window)
	}
	if cfg.MaxTracked < 0 {
		return nil, fmt.Errorf("latency: max tracked %d must not be negative", cfg.MaxTracked)
	}
	if cfg.MinSamples < 0 || cfg.MinSamples > cfg.Samples {
		return nil, fmt.Errorf("latency: min samples %d outside 0..samples (%d)", cfg.MinSamples, cfg.Samples)
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = policies.P2CLatencyMinSamples
	}
	if cfg.MaxTracked == 0 {
		cfg.MaxTracked = DefaultMaxTracked
	}
	return &Tracker{cfg: cfg, windows: make(map[key]*window)}, nil
}

// Record adds one dispatched attempt to the connection's window and, when model is not
// empty, to the connection + model window. ttfb <= 0 means the attempt never saw a first
// byte (it still counts as a sample and, if !ok, as a failure).
func (t *Tracker) Record(provider, connection, model string, at time.Time, ttfb time.Duration, ok bool) {
	if connection == "" {
		return
	}
	s := sample{atNanos: at.UnixNano(), ok: ok}
	if ttfb > 0 {
		ttfb = min(ttfb, maxTTFB)
		s.ttfbMicros = max(int64(ttfb/time.Microsecond), 1)
	}
	t.add(key{provider: provider, connection: connection}, s, at)
	if model != "" {
		t.add(key{provider: provider, connection: connection, model: model}, s, at)
	}
}

func (t *Tracker) add(k key, s sample, now time.Time) {
	w := t.windows[k]
	if w == nil {
		if len(t.windows) >= t.cfg.MaxTracked && !t.evictStale(now) {
			t.Dropped++
			return
		}
		w = &window{ring: make([]sample, t.cfg.Samples)}
		t.windows[k] = w
	}
	w.ring[w.next] = s
	w.next = (w.next + 1) % len(w.ring)
	w.count = min(w.count+1, len(w.ring))
}

// evictStale removes one window whose newest sample has left the time window.
func (t *Tracker) evictStale(now time.Time) bool {
	for k, w := range t.windows {
		newest := w.ring[(w.next-1+len(w.ring))%len(w.ring)]
		if w.count == 0 || !t.inWindow(newest, now) {
			delete(t.windows, k)
			return true
		}
	}
	return false
}

func (t *Tracker) inWindow(s sample, now time.Time) bool {
	return now.UnixNano()-s.atNanos < int64(t.cfg.Window)
}

// Connection returns the connection-level statistics at now.
func (t *Tracker) Connection(provider, connection string, now time.Time) Stats {
	return t.stats(key{provider: provider, connection: connection}, now)
}

// Model returns the connection + model statistics at now (the connection level when model
// is empty).
func (t *Tracker) Model(provider, connection, model string, now time.Time) Stats {
	return t.stats(key{provider: provider, connection: connection, model: model}, now)
}

func (t *Tracker) stats(k key, now time.Time) Stats {
	w := t.windows[k]
	if w == nil {
		return Stats{}
	}
	var st Stats
	var sumMicros int64
	for i := 0; i < w.count; i++ {
		s := w.ring[i]
		if !t.inWindow(s, now) {
			continue
		}
		st.Samples++
		if !s.ok {
			st.Failures++
		}
		if s.ttfbMicros > 0 {
			st.Timed++
			sumMicros += s.ttfbMicros
		}
	}
	if st.Timed > 0 {
		st.MeanTTFB = time.Duration(sumMicros/int64(st.Timed)) * time.Microsecond
	}
	return st
}

// Tracked returns how many windows the tracker holds.
func (t *Tracker) Tracked() int { return len(t.windows) }

// MinSamples is how many samples a window needs before p2c lets it weigh in
// (Config.MinSamples; see PairTerm).
func (t *Tracker) MinSamples() int { return t.cfg.MinSamples }
