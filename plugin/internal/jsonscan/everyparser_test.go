package jsonscan_test

// Every parser on the request and response path (the README's "Parsers and nesting" table)
// returns on hostile nesting — limit+1 levels, 8 MiB of unclosed [ and of {"a": — with its
// expected refusal or pass-through, and none recurses on the input's depth: the cases run in
// a child test process whose goroutine stacks may not grow past smallStack, where a parser
// that recursed per level would die (runtime: "goroutine stack exceeds … limit"). The canary
// shows the bound catches one: gjson.Valid, which recurses, dies there on the same input.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/plugin/internal/admin"
	"github.com/spillwayproxy/spillway/plugin/internal/classify"
	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/errorrules"
	"github.com/spillwayproxy/spillway/plugin/internal/jsonscan"
	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
	"github.com/spillwayproxy/spillway/plugin/internal/retryhint"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

// smallStack bounds the child's goroutine stacks: ample for any parser's own frames, some
// thousand times too small for one frame per level of 8 MiB of brackets.
const smallStack = 256 << 10

const childEnv = "JSONSCAN_EVERY_PARSER_CHILD"

// hostile is one shape of nesting, as a JSON value.
type hostile struct {
	name  string
	value []byte
	limit bool // the shape is limit+1 levels, closed (small enough for every bounded reader)
}

func hostileValues() []hostile {
	const lim = testfixture.JSONDepthLimit
	return []hostile{
		{"limit+1 [", testfixture.Repeat(strings.Repeat("[", lim+1), "", 0, strings.Repeat("]", lim+1)), true},
		{`limit+1 {"a":`, append(testfixture.Repeat("", `{"a":`, lim, "{}"), strings.Repeat("}", lim)...), true},
		{"8 MiB of unclosed [", testfixture.Repeat("", "[", 8<<20, ""), false},
		{`8 MiB of unclosed {"a":`, testfixture.Repeat("", `{"a":`, 8<<20/5, ""), false},
	}
}

// parsers are the readers of the table, each given a hostile value where it reads JSON; each
// fails t unless it answers as it must.
var parsers = []struct {
	name string
	run  func(t *testing.T, h hostile)
}{
	{"request body pass (llmapi.Parser)", func(t *testing.T, h hostile) {
		var p llmapi.Parser
		for _, body := range [][]byte{h.value, append([]byte(`{"model":"m","x":`), h.value...)} {
			_, err := p.Parse(body)
			if body[0] == '[' && !errors.Is(err, llmapi.ErrNotJSON) || body[0] != '[' && !errors.Is(err, llmapi.ErrTooDeep) {
				t.Errorf("Parse(%.20q…) = %v", body, err)
			}
		}
	}},
	{"model rewrite (llmapi.RewriteModel), at the limit", func(t *testing.T, h hostile) {
		if !h.limit {
			return // it rewrites only what the pass accepted
		}
		// The same shape one level short, in a body's object: exactly the limit.
		const lim = testfixture.JSONDepthLimit
		body := testfixture.Repeat(`{"model":"m","x":`, "[", lim-1, strings.Repeat("]", lim-1)+"}")
		if h.value[0] == '{' {
			body = testfixture.Repeat(`{"model":"m","x":`, `{"a":`, lim-2, "{}"+strings.Repeat("}", lim-1))
		}
		req, err := llmapi.ParseRequest(body)
		if err != nil {
			t.Fatalf("at the limit: %v", err)
		}
		out := llmapi.RewriteModel(nil, body, req.ModelAt, "openai/gpt-4o")
		if r, err := llmapi.ParseRequest(out); err != nil || r.Model != "openai/gpt-4o" || len(out) != len(body)+len(`openai/gpt-4o`)-1 {
			t.Errorf("rewritten: %q, %v", r.Model, err)
		}
	}},
	{"SSE first-event judge (llmapi.ScanFirst; also the callout answer's reader)", func(t *testing.T, h hostile) {
		for _, event := range [][]byte{sseEvent("", h.value), sseEvent("error", h.value)} {
			fe := llmapi.ScanFirst(event, true)
			want := llmapi.Content // not JSON to judge: passed through
			if bytes.HasPrefix(event, []byte("event: error")) {
				want = llmapi.Failed // an error event fails whatever its data
			}
			if fe.Verdict != want {
				t.Errorf("verdict %v, want %v", fe.Verdict, want)
			}
		}
	}},
	{"watchdogs' event reader (llmapi.OutputScanner, buger/jsonparser)", func(t *testing.T, h hostile) {
		var s llmapi.OutputScanner
		s.Feed(sseEvent("", h.value))
		// Not an event of a known API: text (an oversized event, data that is no object),
		// or nothing; never the stream's end.
		out, ok := s.Next()
		if !ok || out.End || out.ToolCall || out.Reasoning || h.value[0] == '[' && out.Text == 0 {
			t.Errorf("output %+v, %v", out, ok)
		}
	}},
	{"terminal-event tracker (llmapi.Tracker)", func(t *testing.T, h hostile) {
		var tr llmapi.Tracker
		tr.Feed(sseEvent("", h.value))
		tr.End()
	}},
	{"error-body classifier (classify, with restate, errorrules, retryhint)", func(t *testing.T, h hostile) {
		c := classify.New(restate.Default(), errorrules.Default())
		for _, status := range []int{400, 429, 503} {
			in := classify.Input{Provider: "openai", Profile: policies.ProfileAPIKey, Status: status, Now: now}
			want, _ := c.Classify(in)
			in.Body = h.value
			if got, _ := c.Classify(in); got != want {
				t.Errorf("%d: verdict %+v, want that of a bodiless %d, %+v", status, got, status, want)
			}
		}
	}},
	{"restatement (restate)", func(t *testing.T, h hostile) {
		if r := restate.Default().Apply("agentrouter", 403, nil, h.value, now, nil); r.Restated {
			t.Errorf("restated %+v", r)
		}
	}},
	{"provider error rules (errorrules)", func(t *testing.T, h hostile) {
		if m, ok := errorrules.Default().Match("openai", 400, errorrules.Text{Full: textscan.Cap(h.value)}); ok {
			t.Errorf("matched %+v", m)
		}
	}},
	{"retry hints (retryhint)", func(t *testing.T, h hostile) {
		// The hint paths' names around the nesting: the readers walk into it.
		body := append(append([]byte(`{"error":{"details":[{"retryDelay":`), h.value...), "}]}}"...)
		if hint := retryhint.Find(nil, body, now, nil); hint.Found() {
			t.Errorf("hint %+v", hint)
		}
	}},
	{"text scans (textscan)", func(t *testing.T, h hostile) {
		if n := len(textscan.AppendFolded(nil, h.value)); n > textscan.MaxScanBytes {
			t.Errorf("folded %d bytes", n)
		}
		_ = textscan.UnescapeJSON(nil, textscan.Cap(h.value))
		_ = textscan.Searchable(h.value)
	}},
	{"admin API body reader (admin.Parse)", func(t *testing.T, h hostile) {
		// As much of the shape as the admin API takes (a longer body is 413 unread).
		body := h.value[:min(len(h.value), admin.MaxBodyBytes)]
		if _, e := admin.Parse("/spillway/api/", "POST", "/spillway/api/resilience/cooldowns", body); e == nil || e.Code != admin.CodeInvalidJSON {
			t.Errorf("admin: %+v, want %s", e, admin.CodeInvalidJSON)
		}
	}},
	{"jsonscan.Valid", func(t *testing.T, h hostile) {
		if err := jsonscan.Valid(h.value); !errors.Is(err, jsonscan.ErrTooDeep) {
			t.Errorf("Valid: %v", err)
		}
	}},
}

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// sseEvent is one server-sent event carrying data, named if name is set.
func sseEvent(name string, data []byte) []byte {
	var b []byte
	if name != "" {
		b = append(b, "event: "+name+"\n"...)
	}
	b = append(append(append(b, "data: "...), data...), "\n\n"...)
	return b
}

func TestEveryParserReturnsOnHostileNesting(t *testing.T) {
	switch os.Getenv(childEnv) {
	case "cases":
		debug.SetMaxStack(smallStack)
		for _, h := range hostileValues() {
			for _, p := range parsers {
				t.Run(p.name+"/"+h.name, func(t *testing.T) { p.run(t, h) })
			}
		}
		return
	case "canary":
		debug.SetMaxStack(smallStack)
		gjson.ValidBytes(hostileValues()[2].value)
		return
	}
	if out, err := child("cases"); err != nil {
		t.Fatalf("the parsers under a %d KiB stack: %v\n%s", smallStack>>10, err, summary(out))
	}
	out, err := child("canary")
	if err == nil || !bytes.Contains(out, []byte("stack exceeds")) {
		t.Fatalf("gjson.Valid, which recurses, did not overflow the same stack (%v):\n%s", err, summary(out))
	}
}

// child runs this test again in a process of its own, in the given mode.
func child(mode string) ([]byte, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestEveryParserReturnsOnHostileNesting$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	return cmd.CombinedOutput()
}

// summary is what a child's output says went wrong: the failures and the case that was
// running when the stack overflowed, not the goroutine dump.
func summary(out []byte) []byte {
	var b, running []byte
	for line := range bytes.Lines(out) {
		switch t := bytes.TrimSpace(line); {
		case bytes.HasPrefix(t, []byte("=== RUN")):
			running = line
		case bytes.Contains(t, []byte("stack exceeds")), bytes.HasPrefix(t, []byte("fatal error")):
			b = append(append(b, running...), line...)
		case bytes.HasPrefix(t, []byte("--- FAIL")), bytes.Contains(t, []byte("_test.go:")):
			b = append(b, line...)
		}
	}
	return b
}
