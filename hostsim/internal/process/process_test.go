package process

import (
	"bytes"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

func TestSharedDataCASRules(t *testing.T) {
	p := New[string]()
	for _, step := range []struct {
		name  string
		vmID  string        // namespace written
		key   string        // key written
		value string        // value written
		cas   func() uint32 // the CAS the writer passes, read at the step
		want  abi.Status    // what Set answers
		after string        // the value then stored under (vmID, key)
	}{
		{"cas 0 creates", "a", "k", "v1", func() uint32 { return 0 }, abi.StatusOK, "v1"},
		{"stale cas fails", "a", "k", "v2", func() uint32 { _, c, _ := p.Get("a", "k"); return c + 1 }, abi.StatusCasMismatch, "v1"},
		{"current cas wins", "a", "k", "v3", func() uint32 { _, c, _ := p.Get("a", "k"); return c }, abi.StatusOK, "v3"},
		{"cas 0 overwrites", "a", "k", "v4", func() uint32 { return 0 }, abi.StatusOK, "v4"},
		{"non-zero cas on a missing key succeeds", "a", "new", "n", func() uint32 { return 12345 }, abi.StatusOK, "n"},
		{"namespaces are apart", "b", "k", "other", func() uint32 { return 0 }, abi.StatusOK, "other"},
	} {
		if got := p.Set(step.vmID, step.key, []byte(step.value), step.cas()); got != step.want {
			t.Fatalf("%s: Set = %v, want %v", step.name, got, step.want)
		}
		if v, _, _ := p.Get(step.vmID, step.key); string(v) != step.after {
			t.Fatalf("%s: stored %q, want %q", step.name, v, step.after)
		}
	}
	// One process-global counter: every successful write got a distinct, increasing CAS.
	_, c1, _ := p.Get("a", "new")
	_, c2, _ := p.Get("b", "k")
	if c2 <= c1 {
		t.Fatalf("CAS across namespaces: %d then %d, want increasing", c1, c2)
	}
	if got := p.Keys("a"); len(got) != 2 || got[0] != "k" || got[1] != "new" {
		t.Fatalf("Keys(a) = %q, want [k new]", got)
	}
}

func TestQueuesAndRelease(t *testing.T) {
	p := New[string]()
	p.Acquire("a")
	p.Acquire("a")
	tok := p.Register("a", "q", Registrant[string]{Target: "worker-0", Gen: 1, Root: 1})
	if again := p.Register("a", "q", Registrant[string]{Target: "worker-1", Gen: 1, Root: 3}); again != tok {
		t.Fatalf("re-registering gave token %d, want the first one %d", again, tok)
	}
	r, st := p.Enqueue(tok, []byte("x"))
	if st != abi.StatusOK || r.Target != "worker-1" || r.Root != 3 {
		t.Fatalf("Enqueue = %+v, %v; want the last registrant, Ok", r, st)
	}
	if v, st := p.Dequeue(tok); st != abi.StatusOK || !bytes.Equal(v, []byte("x")) {
		t.Fatalf("Dequeue = %q, %v; want x, Ok", v, st)
	}
	if _, st := p.Dequeue(tok); st != abi.StatusEmpty {
		t.Fatalf("Dequeue of an empty queue = %v, want Empty", st)
	}
	if _, st := p.Enqueue(tok+1, nil); st != abi.StatusNotFound {
		t.Fatalf("Enqueue to an unknown token = %v, want NotFound", st)
	}
	p.Set("a", "k", []byte("v"), 0)
	p.Release("a")
	if _, _, found := p.Resolve("a", "q"); !found {
		t.Fatal("the queue went with the first of two users")
	}
	p.Release("a")
	if _, _, found := p.Resolve("a", "q"); found {
		t.Fatal("the queue outlived its namespace's last user")
	}
	if _, _, found := p.Get("a", "k"); found {
		t.Fatal("shared data outlived its namespace's last user")
	}
}
