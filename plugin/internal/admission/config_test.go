package admission

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

func TestDefaultQueueConfigIsTheGuides(t *testing.T) {
	c := DefaultQueueConfig()
	if c.MaxWait != 30*time.Second || c.ExecutionMaxWait != 10*time.Minute || c.MaxQueueDepth != 0 {
		t.Fatalf("DefaultQueueConfig() = %+v, want 30s / 10m / 0", c)
	}
}

// The precedence of the queue layers (default < RATE_LIMIT_* < requestQueue <
// rateLimitOverrides) is resolved once, in package policies (TestQueueEnvironmentLayer,
// TestQueueBudgetPrecedence there); admission converts the result and clamps it.

func TestQueueConfigFromTheResolvedConnection(t *testing.T) {
	c := &policies.ResolvedConnection{ID: "a", MaxConcurrent: 3, ModelConcurrency: map[string]int{"m": 1},
		QueueMaxWait: 2 * time.Second, ExecutionMaxWait: time.Minute, MaxQueueDepth: 7}
	for _, quotaShare := range []bool{false, true} { // resilience.quotaShareConcurrencyLimit.enabled
		got := GateConfigFrom(&policies.Resolved{QuotaShareConcurrencyLimitEnabled: quotaShare}, "p", c)
		want := GateConfig{Provider: "p", Connection: "a", MaxConcurrent: 3, ModelConcurrency: map[string]int{"m": 1},
			Queue:              QueueConfig{MaxWait: 2 * time.Second, ExecutionMaxWait: time.Minute, MaxQueueDepth: 7},
			QuotaShareFailOpen: quotaShare}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("GateConfigFrom = %+v, want %+v", got, want)
		}
	}
}

func TestNormalizeClamps(t *testing.T) {
	tests := []struct {
		name string
		in   QueueConfig // as configured
		want QueueConfig // clamped
	}{
		{name: "guide defaults unchanged", in: DefaultQueueConfig(), want: QueueConfig{MaxWait: 30 * time.Second, ExecutionMaxWait: 10 * time.Minute}},
		{name: "waits clamp to 1 ms", in: QueueConfig{MaxWait: 0, ExecutionMaxWait: -5 * time.Millisecond},
			want: QueueConfig{MaxWait: time.Millisecond, ExecutionMaxWait: time.Millisecond}},
		{name: "waits clamp to 24 h", in: QueueConfig{MaxWait: 24*time.Hour + time.Millisecond, ExecutionMaxWait: 1 << 62},
			want: QueueConfig{MaxWait: 24 * time.Hour, ExecutionMaxWait: 24 * time.Hour}},
		{name: "depth clamps to 100000", in: QueueConfig{MaxWait: time.Second, ExecutionMaxWait: time.Second, MaxQueueDepth: 250000},
			want: QueueConfig{MaxWait: time.Second, ExecutionMaxWait: time.Second, MaxQueueDepth: 100000}},
		{name: "negative depth clamps to 0 (unbounded)", in: QueueConfig{MaxWait: time.Second, ExecutionMaxWait: time.Second, MaxQueueDepth: -3},
			want: QueueConfig{MaxWait: time.Second, ExecutionMaxWait: time.Second}},
	}
	for _, tc := range tests {
		if got := tc.in.Normalize(); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestNewGateValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  GateConfig // input
		bad  string     // fragment of the expected error ("" = valid)
	}{
		{name: "valid", cfg: GateConfig{Provider: "glm", Connection: "a", MaxConcurrent: 4, ModelConcurrency: map[string]int{"glm-5": 1}}},
		{name: "no ids", cfg: GateConfig{}, bad: "ids are required"},
		{name: "negative cap", cfg: GateConfig{Provider: "p", Connection: "c", MaxConcurrent: -1}, bad: "maxConcurrent=-1"},
		{name: "huge cap", cfg: GateConfig{Provider: "p", Connection: "c", ProviderMaxConcurrent: MaxCap + 1}, bad: "providerMaxConcurrent"},
		{name: "zero model cap", cfg: GateConfig{Provider: "p", Connection: "c", ModelConcurrency: map[string]int{"m": 0}}, bad: `modelConcurrency["m"]=0`},
		{name: "empty model id", cfg: GateConfig{Provider: "p", Connection: "c", ModelConcurrency: map[string]int{"": 1}}, bad: "empty model id"},
	}
	for _, tc := range tests {
		g, err := NewGate(tc.cfg)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.bad)
		case tc.bad != "" && g != nil:
			t.Errorf("%s: got a gate with an error", tc.name)
		}
	}
}

func TestGateModelCapsAreExact(t *testing.T) {
	g, err := NewGate(GateConfig{Provider: "zai", Connection: "a", ModelConcurrency: map[string]int{"glm-5": 1, "glm-4.7": 3}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model   string // model asked for
		cap     int    // its cap
		limited bool   // goes through admission
	}{
		{model: "glm-5", cap: 1, limited: true},
		{model: "glm-4.7", cap: 3, limited: true},
		{model: "zai/glm-5", cap: 0, limited: false}, // a client-side alias does not match
		{model: "GLM-5", cap: 0, limited: false},     // exact, case included
		{model: "glm-4", cap: 0, limited: false},     // no cap and no connection cap
	}
	for _, tc := range tests {
		if c := g.ModelCap(tc.model); c != tc.cap {
			t.Errorf("ModelCap(%q) = %d, want %d", tc.model, c, tc.cap)
		}
		if l := g.Limited(tc.model); l != tc.limited {
			t.Errorf("Limited(%q) = %v, want %v", tc.model, l, tc.limited)
		}
	}
}

func TestGateKeysAreUnambiguous(t *testing.T) {
	a, _ := NewGate(GateConfig{Provider: "a:b", Connection: "c", MaxConcurrent: 1})
	b, _ := NewGate(GateConfig{Provider: "a", Connection: "b:c", MaxConcurrent: 1})
	if a.leaseKey == b.leaseKey || a.ticketKey == b.ticketKey || a.ID() == b.ID() {
		t.Fatalf("two connections share a key or an id: %q %q", a.leaseKey, a.ticketKey)
	}
	if !strings.HasPrefix(a.leaseKey, "spw2:") || !strings.HasPrefix(a.ticketKey, "spw2:") || !strings.HasPrefix(a.providerKey, "spw2:") || !strings.HasPrefix(a.globalKey, "spw2:") {
		t.Fatalf("keys lack the state prefix: %q %q %q", a.leaseKey, a.providerKey, a.globalKey)
	}
}

func TestGateReplies(t *testing.T) {
	g, _ := NewGate(GateConfig{Provider: "glm", Connection: "a", MaxConcurrent: 1, Queue: QueueConfig{MaxWait: 30 * time.Second, ExecutionMaxWait: 10 * time.Minute, MaxQueueDepth: 5}})
	tests := []struct {
		err    error
		status int    // HTTP status
		code   string // error.code
	}{
		{err: ErrQueueFull, status: 429, code: "RATE_LIMIT_QUEUE_FULL"},
		{err: ErrQueueTimeout, status: 429, code: "RATE_LIMIT_QUEUE_TIMEOUT"},
		{err: ErrExecutionTimeout, status: 504, code: "RATE_LIMIT_EXECUTION_TIMEOUT"},
	}
	for _, tc := range tests {
		r, ok := g.Reply(tc.err)
		var typed *Error
		if !ok || r.Status != tc.status || r.Code != tc.code || !errors.As(tc.err, &typed) || typed.Status != tc.status || typed.Code != tc.code {
			t.Errorf("%v: reply %d %q ok=%v", tc.err, r.Status, r.Code, ok)
		}
	}
	if _, ok := g.Reply(errors.New("store down")); ok {
		t.Error("a store error became a client reply")
	}
}

func TestQueueFullNamesTheLimitTheTargetAndTheRealQueue(t *testing.T) {
	// guide §5: a request beyond maxQueueDepth gets RATE_LIMIT_QUEUE_FULL at once; the reply
	// says which limit, on which provider connection and model, and how many really wait —
	// which can exceed the limit when it was lowered while requests waited.
	w := newWorld(1)
	queue := QueueConfig{MaxWait: 30 * time.Second, ExecutionMaxWait: 10 * time.Minute}
	unbounded := mustGate(t, GateConfig{Provider: "glm", Connection: "glm-a", MaxConcurrent: 1, Queue: queue})
	queue.MaxQueueDepth = 5
	bounded := mustGate(t, GateConfig{Provider: "glm", Connection: "glm-a", MaxConcurrent: 1, Queue: queue})
	if r, err := w.workers[0].Admit(unbounded, "glm-5"); err != nil || !r.Granted {
		t.Fatalf("first admit: %+v %v", r, err)
	}
	for i := range 7 { // queued under the old, unbounded setting
		if r, err := w.workers[0].Admit(unbounded, "glm-5"); err != nil || r.Granted {
			t.Fatalf("queue %d: %+v %v", i, r, err)
		}
	}
	_, err := w.workers[0].Admit(bounded, "glm-5")
	var full *Error
	if !errors.Is(err, ErrQueueFull) || !errors.As(err, &full) {
		t.Fatalf("admit past the depth: %v, want RATE_LIMIT_QUEUE_FULL", err)
	}
	want := Error{Code: "RATE_LIMIT_QUEUE_FULL", Status: 429, Provider: "glm", Connection: "glm-a", Model: "glm-5", Limit: 5, Queued: 7}
	got := *full
	got.msg = ""
	if got != want {
		t.Fatalf("error %+v, want %+v", got, want)
	}
	if !strings.Contains(err.Error(), `"glm-5"`) || !strings.Contains(err.Error(), "7 waiting") || !strings.Contains(err.Error(), "maxQueueDepth 5") {
		t.Fatalf("error text %q", err)
	}
	r, ok := bounded.Reply(err)
	var body struct {
		Error struct {
			Code, Provider, Connection, Model string
			MaxQueueDepth                     int `json:"max_queue_depth"`
			QueueLength                       int `json:"queue_length"`
		}
	}
	if !ok || r.Status != 429 || json.Unmarshal(r.Body, &body) != nil {
		t.Fatalf("reply %d %s", r.Status, r.Body)
	}
	if b := body.Error; b.Code != "RATE_LIMIT_QUEUE_FULL" || b.Provider != "glm" || b.Connection != "glm-a" || b.Model != "glm-5" ||
		b.MaxQueueDepth != 5 || b.QueueLength != 7 {
		t.Fatalf("reply body %s", r.Body)
	}
	if errors.Is(err, ErrQueueTimeout) {
		t.Fatal("a queue-full error matches the queue timeout")
	}
}
