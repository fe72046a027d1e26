package watchdog

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/policies"
)

// Events as llmapi.OutputScanner reports them.
var (
	heartbeat = llmapi.Output{}                // a comment, ping, usage-only or empty event
	toolCall  = llmapi.Output{ToolCall: true}  // a tool call's start or arguments
	reasoning = llmapi.Output{Reasoning: true} // a thinking or reasoning frame
	blockDone = llmapi.Output{Done: true}      // content_block_stop, output_item.done, a finish_reason
	end       = llmapi.Output{End: true}       // the terminal or an error event
)

func text(n int) llmapi.Output { return llmapi.Output{Text: n} }

// step is an event at a time, or (without an event) a judgement at a time.
type step struct {
	at   time.Duration  // since the stream's start
	ev   *llmapi.Output // the event seen then; nil: judge
	want Verdict        // the verdict expected (judgements only)
}

func see(ms int, o llmapi.Output) step { return step{at: ms2d(ms), ev: &o} }
func judge(ms int, v Verdict) step     { return step{at: ms2d(ms), want: v} }
func ms2d(ms int) time.Duration        { return time.Duration(ms) * time.Millisecond }
func every(from, to, stepMs int, o llmapi.Output) []step {
	var s []step
	for ms := from; ms <= to; ms += stepMs {
		s = append(s, see(ms, o))
	}
	return s
}

func steps(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch p := p.(type) {
		case step:
			out = append(out, p)
		case []step:
			out = append(out, p...)
		}
	}
	return out
}

// throughput is a throughput watchdog's config.
func throughput(warmupMs, windowMs int, rate, minOutput int64) Config {
	return Config{Throughput: true, Warmup: ms2d(warmupMs), Window: ms2d(windowMs), MinBytesPerSecond: rate, MinOutputBytes: minOutput}
}

func TestWatchdog(t *testing.T) {
	cases := []struct {
		name  string // the rule of guide §6 or §2 shown
		cfg   Config // the watchdogs' settings
		steps []step // events and judgements in time order
	}{
		// Guide §6: no verdict before the warm-up plus one full rolling window.
		{"slow output is judged only after warm-up plus a full window", throughput(1000, 2000, 10, 1), steps(
			see(0, text(1)), judge(1000, Keep), judge(2999, Keep), judge(3000, TooSlow))},
		{"healthy sustained output is never judged slow", throughput(1000, 2000, 2, 1), steps(
			every(0, 8000, 1000, text(14)), judge(3000, Keep), judge(8000, Keep), judge(8500, Keep))},
		{"output that slows down is judged once the window holds only the slow part", throughput(0, 2000, 10, 1), steps(
			every(0, 2000, 100, text(5)), judge(2000, Keep), see(3000, text(1)), judge(3000, Keep), judge(4000, TooSlow))},
		// The window's oldest bucket (a sixteenth of it) may still hold older output: never
		// judged slower than it is.
		{"the window reads up to one bucket of older output", throughput(0, 2000, 1, 1), steps(
			see(0, text(100)), judge(2000, Keep), judge(2124, Keep), judge(2125, TooSlow))},
		// Heartbeats, usage-only and empty events are no output.
		{"heartbeats are no output", throughput(0, 1000, 1, 1), steps(
			every(0, 1000, 100, heartbeat), judge(999, Keep), judge(1000, TooSlow))},
		// Tool calls and reasoning suspend judgement; once they end, a full window must pass.
		{"a tool call suspends judgement", throughput(0, 1000, 100, 1), steps(
			see(0, toolCall), judge(2000, Keep), see(2000, heartbeat), judge(9000, Keep))},
		{"reasoning suspends judgement", throughput(0, 1000, 100, 1), steps(
			see(0, reasoning), see(500, reasoning), judge(4000, Keep))},
		{"text after a tool call needs a full window before a verdict", throughput(0, 1000, 100, 1), steps(
			see(0, toolCall), see(4000, text(6)), judge(4999, Keep), judge(5000, TooSlow))},
		{"fast text after a tool call is kept", throughput(0, 1000, 10, 1), steps(
			see(0, toolCall), every(4000, 7000, 100, text(5)), judge(5000, Keep), judge(7000, Keep))},
		{"a finished block ends the suspension too", throughput(0, 1000, 1, 1), steps(
			see(0, reasoning), see(3000, blockDone), judge(3999, Keep), judge(4000, TooSlow))},
		{"a finished tool call item ends it", throughput(0, 1000, 1, 1), steps(
			see(0, toolCall), see(2000, llmapi.Output{ToolCall: true, Done: true}), judge(2999, Keep), judge(3000, TooSlow))},
		// minOutputBytes, the minimum measurable output: a window with less is slow.
		{"a window below the minimum measurable output is slow", throughput(0, 10000, 1, 64), steps(
			every(0, 10000, 1000, text(2)), judge(10000, TooSlow))},
		{"a window at the minimum measurable output is kept", throughput(0, 10000, 1, 64), steps(
			every(0, 10000, 1000, text(7)), judge(10000, Keep))},
		{"the rate decides when it asks for more", throughput(0, 10000, 10, 64), steps(
			every(0, 10000, 1000, text(7)), judge(10000, TooSlow))},
		// The end of the response ends the judging.
		{"no verdict after the terminal event", throughput(0, 1000, 1000, 1), steps(
			see(0, text(1)), see(10, end), judge(60000, Keep))},
		{"off judges nothing", Config{}, steps(see(0, heartbeat), judge(3_600_000, Keep))},
		// Guide §2: the content stall.
		{"no output within the budget is a stall", Config{Stall: time.Minute}, steps(
			every(0, 60000, 10000, heartbeat), judge(59999, Keep), judge(60000, Stalled))},
		{"output restarts the budget", Config{Stall: time.Minute}, steps(
			see(0, text(1)), see(50000, text(1)), judge(100000, Keep), judge(110000, Stalled))},
		{"reasoning frames restart the budget", Config{Stall: time.Minute}, steps(
			every(0, 300000, 50000, reasoning), judge(300000, Keep), judge(350000, Keep),
			every(310000, 400000, 15000, heartbeat), judge(359999, Keep), judge(360000, Stalled))},
		{"tool-call frames restart it", Config{Stall: time.Minute}, steps(
			every(0, 120000, 30000, toolCall), judge(179999, Keep), judge(180000, Stalled))},
		{"a finished block is no output", Config{Stall: time.Minute}, steps(
			see(0, text(1)), see(30000, blockDone), judge(60000, Stalled))},
		{"no stall after the terminal event", Config{Stall: time.Minute}, steps(
			see(0, text(1)), see(1000, end), judge(3_600_000, Keep))},
		{"a stall is judged while a tool call is pending", Config{Throughput: true, Window: time.Second, MinBytesPerSecond: 1, Stall: time.Minute}, steps(
			see(0, toolCall), every(0, 90000, 15000, heartbeat), judge(59999, Keep), judge(60000, Stalled))},
		{"with both on a stall wins over slowness", Config{Throughput: true, Window: time.Second, MinBytesPerSecond: 1, Stall: time.Second}, steps(
			judge(999, Keep), judge(1000, Stalled))},
	}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			var w Watchdog
			w.Start(&cfg, start)
			for i, s := range c.steps {
				if s.ev != nil {
					w.Observe(start.Add(s.at), *s.ev)
					continue
				}
				if v := w.Judge(start.Add(s.at)); v != s.want {
					t.Fatalf("step %d: at %v %v, want %v", i, s.at, v, s.want)
				}
			}
		})
	}
}

// Judging out of order with the events (a tick between chunks reads a later time) and a
// clock that goes back never lose output.
func TestWatchdogTimesOutOfOrder(t *testing.T) {
	cfg := throughput(0, 1000, 10, 1)
	start := time.Unix(1000, 0)
	var w Watchdog
	w.Start(&cfg, start)
	w.Observe(start.Add(2*time.Second), text(20))
	w.Observe(start.Add(1500*time.Millisecond), text(20)) // late: counted in the newest window kept
	if v := w.Judge(start.Add(2 * time.Second)); v != Keep {
		t.Fatalf("%v with 40 bytes in the window", v)
	}
	w.Observe(start.Add(-time.Hour), text(1)) // before the start: at the start
	if v := w.Judge(start.Add(-time.Hour)); v != Keep {
		t.Fatalf("%v before the warm-up", v)
	}
}

// A long silence zeroes the whole window, however long.
func TestWatchdogLongGapForgetsOldOutput(t *testing.T) {
	cfg := throughput(0, 1000, 10, 1)
	start := time.Unix(1000, 0)
	var w Watchdog
	w.Start(&cfg, start)
	for ms := 0; ms < 2000; ms += 50 {
		w.Observe(start.Add(ms2d(ms)), text(100))
	}
	w.Observe(start.Add(time.Hour), text(1))
	if v := w.Judge(start.Add(time.Hour)); v != TooSlow {
		t.Fatalf("%v: an hour later only 1 byte is in the window", v)
	}
}

func TestConfigFrom(t *testing.T) {
	tw := policies.ThroughputWatchdogSettings{Enabled: true, Window: 30 * time.Second, Warmup: 10 * time.Second,
		MinBytesPerSecond: 8, MinOutputBytes: 64}
	got := ConfigFrom(tw, policies.ContentStallSettings{Enabled: false, Timeout: time.Minute})
	want := Config{Throughput: true, Warmup: 10 * time.Second, Window: 30 * time.Second, MinBytesPerSecond: 8, MinOutputBytes: 64}
	if got != want || !got.On() || got.need() != 240 {
		t.Fatalf("%+v need %d, want %+v need 240", got, got.need(), want)
	}
	off := ConfigFrom(policies.ThroughputWatchdogSettings{Window: time.Second}, policies.ContentStallSettings{Timeout: time.Minute})
	if off.On() {
		t.Fatalf("%+v is on", off)
	}
	stall := ConfigFrom(policies.ThroughputWatchdogSettings{}, policies.ContentStallSettings{Enabled: true, Timeout: time.Minute})
	if !stall.On() || stall.Stall != time.Minute || stall.Throughput {
		t.Fatalf("%+v", stall)
	}
	// The defaults: both off.
	p, err := policies.Parse([]byte(`{"providers":[{"id":"p","cluster":"c","connections":[{"id":"k","credential":{"header":"authorization","value":"x"}}]}],"routes":[{"model":"m","targets":[{"provider":"p"}]}]}`), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := p.Resolved()
	if d := ConfigFrom(r.ThroughputWatchdog, r.ContentStall); d.On() {
		t.Fatalf("default %+v is on", d)
	}
}

func TestVerdictTexts(t *testing.T) {
	for _, v := range []Verdict{TooSlow, Stalled} {
		if v.Code() == "" || v.Message() == "" || v.String() == "keep" {
			t.Errorf("verdict %d lacks its texts", v)
		}
	}
	if Keep.Code() != "" {
		t.Error("Keep has a code")
	}
}

// BenchmarkPerChunk is the work the filter adds per chunk of a committed stream with the
// watchdogs on — read the chunk's events, observe each, judge — over a long chat stream in
// 100-byte chunks; x-tracker is its time over the terminal-event Tracker's on the same
// chunks (the work every committed stream already does), measured in the same run.
func BenchmarkPerChunk(b *testing.B) {
	ev := "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"finish_reason\":null}]}\n\n"
	var stream []byte
	for range 200 {
		stream = append(stream, ev...)
	}
	var chunks [][]byte
	for i := 0; i < len(stream); i += 100 {
		chunks = append(chunks, stream[i:min(i+100, len(stream))])
	}
	cfg := throughput(10000, 30000, 8, 64)
	cfg.Stall = 2 * time.Minute
	start := time.Unix(1000, 0)
	var s llmapi.OutputScanner
	var w Watchdog
	var tr llmapi.Tracker
	var watchNs, trackNs time.Duration
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		s.Reset()
		w.Start(&cfg, start)
		t0 := time.Now()
		for i, ch := range chunks {
			now := start.Add(time.Duration(i) * 10 * time.Millisecond)
			s.Feed(ch)
			for o, ok := s.Next(); ok; o, ok = s.Next() {
				w.Observe(now, o)
			}
			w.Judge(now)
		}
		t1 := time.Now()
		tr = llmapi.Tracker{}
		for _, ch := range chunks {
			tr.Feed(ch)
		}
		watchNs += t1.Sub(t0)
		trackNs += time.Since(t1)
	}
	b.ReportMetric(float64(watchNs)/float64(trackNs), "x-tracker")
}
