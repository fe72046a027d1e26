// Package envoycheck is `make envoy-check`'s evidence from a real Envoy for hostsim: it runs
// the probe guest's scenarios (scenarios.go) in an Envoy binary and in hostsim, writes what
// the probe logged in each as a trace in hostsim's golden format — the probe's "cb ..." and
// "op ..." lines (hostsim/testdata/guests/probe), the ones hostsim's own tests assert — and
// the diff between the two.
package envoycheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-cmp/cmp"

	"github.com/spillwayproxy/spillway/hostsim"
)

// Trace is what the probe logged on the worker that served a scenario's request, in order.
type Trace struct {
	Scenario string   // the scenario's name
	Source   string   // where it ran: "envoy" (with its --version line) or "hostsim"
	Lines    []string // the probe's "cb ..." and "op ..." lines
}

// Golden format: a header line, then one probe line per line.
//
//	# envoy-check <scenario> <source>
//	cb context_create ctx=1 0
//	...
const headerPrefix = "# envoy-check "

// Marshal writes t in the golden format.
func (t Trace) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s%s %s\n", headerPrefix, t.Scenario, t.Source)
	for _, l := range t.Lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// ErrFormat is wrapped by ParseTrace's errors.
var ErrFormat = errors.New("envoycheck: not a trace")

// ParseTrace reads a trace Marshal wrote.
func ParseTrace(b []byte) (Trace, error) {
	head, rest, _ := bytes.Cut(b, []byte("\n"))
	h, ok := strings.CutPrefix(string(head), headerPrefix)
	if !ok {
		return Trace{}, fmt.Errorf("%w: no %q header", ErrFormat, strings.TrimSpace(headerPrefix))
	}
	scenario, source, ok := strings.Cut(h, " ")
	if !ok || scenario == "" {
		return Trace{}, fmt.Errorf("%w: header %q names no scenario and source", ErrFormat, head)
	}
	t := Trace{Scenario: scenario, Source: source}
	for _, l := range strings.Split(strings.TrimSuffix(string(rest), "\n"), "\n") {
		if l == "" {
			continue
		}
		if !probeLine(l) {
			return Trace{}, fmt.Errorf("%w: %q is no probe line", ErrFormat, l)
		}
		t.Lines = append(t.Lines, l)
	}
	return t, nil
}

func probeLine(l string) bool { return strings.HasPrefix(l, "cb ") || strings.HasPrefix(l, "op ") }

// FromHostsim is the probe's lines worker-0 logged.
func FromHostsim(logs []hostsim.LogEntry) []string {
	var out []string
	for _, l := range logs {
		if l.VM == "worker-0" && probeLine(l.Message) {
			out = append(out, l.Message)
		}
	}
	return out
}

// EnvoyLogFormat is the log format envoy-check runs Envoy with (--log-format): the thread
// id, then the message. A Wasm log line's message is "wasm log<prefix>: <message>"
// (Context::log; the prefix is the plugin's name, root_id and vm_id, cpp-host
// PluginBase::makeLogPrefix).
const EnvoyLogFormat = "[%t] %v"

var envoyWasmLine = regexp.MustCompile(`^\[(\d+)\] wasm log[^:]*: (.*)$`)

// FromEnvoyLog is the probe's lines the worker logged in an Envoy log written with
// EnvoyLogFormat: the lines of the thread that ran the request's callbacks (the first to log
// "cb request_headers"), which with --concurrency 1 is the one worker. The main thread's
// lines (the canary's, the main-thread plugin's) are left out, as hostsim's main and canary
// VMs are from FromHostsim.
func FromEnvoyLog(log []byte) ([]string, error) {
	type line struct{ thread, msg string }
	var lines []line
	worker := ""
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := envoyWasmLine.FindStringSubmatch(sc.Text())
		if m == nil || !probeLine(m[2]) {
			continue
		}
		lines = append(lines, line{m[1], m[2]})
		if worker == "" && strings.HasPrefix(m[2], "cb request_headers ") {
			worker = m[1]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("envoycheck: reading the Envoy log: %w", err)
	}
	if worker == "" {
		return nil, errors.New("envoycheck: the Envoy log has no probe request_headers line: the request never reached the filter")
	}
	var out []string
	for _, l := range lines {
		if l.thread == worker {
			out = append(out, l.msg)
		}
	}
	return out, nil
}

// volatile are the parts of a probe line that differ between two correct runs: a callout's
// token (Envoy numbers its calls per VM from its own base).
var volatile = regexp.MustCompile(`token=\d+`)

func normalize(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = volatile.ReplaceAllString(l, "token=N")
	}
	return out
}

// Diff compares Envoy's trace with hostsim's, line by line after normalizing what is volatile:
// "" when they agree, else a diff (- Envoy, + hostsim).
func Diff(envoy, host Trace) string {
	return cmp.Diff(normalize(envoy.Lines), normalize(host.Lines))
}
