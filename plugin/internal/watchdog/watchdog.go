// Package watchdog judges a streamed response by the model output it carries: the
// slow-stream throughput watchdog (guide §6) and the content stall (guide §2), on the
// times its caller passes; it keeps a stream's state in a fixed-size value.
//
// Throughput (guide §6, "Throughput-watchdog voor trage streams"): the useful output of a
// stream — the UTF-8 bytes of its text deltas (llmapi.Output.Text) — is summed over a rolling
// window. No verdict comes before the warm-up plus one full window have passed, nor while a
// tool call or a reasoning phase is pending (judgement is suspended), nor before one full
// window has passed since such a phase ended (the window must not hold the phase's silence).
// Then a window with less output than minBytesPerSecond × the window, or than
// minOutputBytes (the minimum measurable output), is too slow. Heartbeats, usage and
// metadata are no output and reset nothing.
//
// Content stall (guide §2, "Stilstanden in stream-content koelen het account niet af", and
// "Reasoning-frames herstarten het content-stall-budget"): a stream that goes the budget
// without model output — text, a tool call, or a reasoning frame, each of which restarts the
// budget — has stalled. Heartbeats do not restart it, so a turn that stops reasoning and
// only sends heartbeats still stalls.
//
// Both end with the response: after its terminal or error event there is no verdict.
package watchdog

import (
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/policies"
)

// Config is the watchdogs' settings.
type Config struct {
	// Throughput turns the throughput watchdog on.
	Throughput bool
	// Warmup is the grace before the first throughput verdict.
	Warmup time.Duration
	// Window is the rolling window the output is summed over (at least buckets ns).
	Window time.Duration
	// MinBytesPerSecond is the slowest acceptable output rate.
	MinBytesPerSecond int64
	// MinOutputBytes is the least output a window must carry.
	MinOutputBytes int64
	// Stall is the content-stall budget; 0 turns the content stall off.
	Stall time.Duration
}

// ConfigFrom converts the resolved policy settings.
func ConfigFrom(t policies.ThroughputWatchdogSettings, s policies.ContentStallSettings) Config {
	c := Config{Throughput: t.Enabled, Warmup: t.Warmup, Window: t.Window,
		MinBytesPerSecond: t.MinBytesPerSecond, MinOutputBytes: t.MinOutputBytes}
	if s.Enabled {
		c.Stall = s.Timeout
	}
	return c
}

// On reports whether either watchdog is on.
func (c *Config) On() bool { return c.Throughput || c.Stall > 0 }

// need is the least output a full window must carry.
func (c *Config) need() int64 {
	return max(c.MinBytesPerSecond*int64(c.Window/time.Millisecond)/1000, c.MinOutputBytes)
}

// Verdict is a watchdog's judgement of a stream.
type Verdict uint8

// Verdicts.
const (
	Keep    Verdict = iota // let the stream go on
	TooSlow                // the throughput watchdog: output below the minimum rate
	Stalled                // the content stall: no model output within the budget
)

// String names the verdict (logs).
func (v Verdict) String() string {
	switch v {
	case TooSlow:
		return "throughput too low"
	case Stalled:
		return "content stall"
	}
	return "keep"
}

// Code is the stable error code of the error event that ends a stream with the verdict.
// STREAM_THROUGHPUT_TOO_LOW is OmniRoute's code for the same abort.
func (v Verdict) Code() string {
	switch v {
	case TooSlow:
		return "STREAM_THROUGHPUT_TOO_LOW"
	case Stalled:
		return "STREAM_CONTENT_STALL"
	}
	return ""
}

// Message is the error event's text for the verdict.
func (v Verdict) Message() string {
	switch v {
	case TooSlow:
		return "the provider's stream produced output below the throughput watchdog's minimum rate; Spillway ended it"
	case Stalled:
		return "the provider's stream sent no model output within the content-stall budget; Spillway ended it"
	}
	return ""
}

// buckets is how many buckets the window is kept in. The sum over the window reads one
// bucket more than the window (its oldest part), so it can count up to a sixteenth of a
// window of older output: never less than the window holds, so a stream is never judged
// slower than it is.
const buckets = 16

// Watchdog is one stream's state. Start it, Observe each event, Judge at any time (each
// event, each tick).
type Watchdog struct {
	cfg   *Config
	start time.Time
	width time.Duration // of a bucket: Window / buckets
	need  int64
	// Times are offsets from start.
	judgeFrom  time.Duration // no throughput verdict before
	lastOutput time.Duration // the last model output (the content stall's budget runs from it)
	head       int64         // index of the newest bucket written
	ring       [buckets + 1]int64
	pending    bool // a tool call or reasoning phase is under way
	ended      bool // the response's terminal or error event went by
}

// Start begins watching a stream at now (its response's start) with cfg, which must stay
// unchanged while the stream is watched.
func (w *Watchdog) Start(cfg *Config, now time.Time) {
	*w = Watchdog{cfg: cfg, start: now, judgeFrom: cfg.Warmup + cfg.Window,
		width: max(cfg.Window/buckets, 1), need: cfg.need()}
}

// Ended reports whether the response's end went by (no verdict is ever given after it).
func (w *Watchdog) Ended() bool { return w.ended }

// Observe takes one event of the stream, seen at now.
func (w *Watchdog) Observe(now time.Time, o llmapi.Output) {
	if w.ended || w.cfg == nil {
		return
	}
	if o.End {
		w.ended = true
		return
	}
	t := w.offset(now)
	if o.Progress() {
		w.lastOutput = max(w.lastOutput, t)
	}
	if o.Text > 0 {
		w.add(t, int64(o.Text))
	}
	switch {
	case (o.ToolCall || o.Reasoning) && !o.Done:
		w.pending = true
	case w.pending && (o.Text > 0 || o.Done):
		// The phase is over: judge again only on a window that follows it.
		w.pending = false
		w.judgeFrom = max(w.judgeFrom, t+w.cfg.Window)
	}
}

// Judge gives the verdict on the stream at now.
func (w *Watchdog) Judge(now time.Time) Verdict {
	if w.ended || w.cfg == nil {
		return Keep
	}
	t := w.offset(now)
	if w.cfg.Stall > 0 && t-w.lastOutput >= w.cfg.Stall {
		return Stalled
	}
	if !w.cfg.Throughput || w.pending || t < w.judgeFrom {
		return Keep
	}
	if w.windowBytes(t) < w.need {
		return TooSlow
	}
	return Keep
}

// offset is now as an offset from the start; a clock that went back reads as the start.
func (w *Watchdog) offset(now time.Time) time.Duration { return max(now.Sub(w.start), 0) }

// add counts n bytes of output at offset t.
func (w *Watchdog) add(t time.Duration, n int64) {
	b := int64(t / w.width)
	if b > w.head {
		for k := w.head + 1; k <= b && k <= w.head+buckets+1; k++ {
			w.ring[k%(buckets+1)] = 0
		}
		w.head = b
	}
	w.ring[max(b, w.head-buckets)%(buckets+1)] += n // (a late event goes into the oldest bucket kept)
}

// windowBytes sums the output of the buckets that hold the window ending at t.
func (w *Watchdog) windowBytes(t time.Duration) int64 {
	b := max(int64(t/w.width), w.head)
	var sum int64
	for k := max(b-buckets, w.head-buckets, 0); k <= w.head; k++ {
		sum += w.ring[k%(buckets+1)]
	}
	return sum
}
