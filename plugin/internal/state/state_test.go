package state

import (
	"errors"
	"strconv"
	"sync"
	"testing"
)

// increment is an UpdateFunc that adds one to a decimal counter.
func increment(cur []byte, found bool) ([]byte, Mutation, error) {
	n := 0
	if found {
		var err error
		if n, err = strconv.Atoi(string(cur)); err != nil {
			return nil, Keep, err
		}
	}
	return []byte(strconv.Itoa(n + 1)), Write, nil
}

func counter(t *testing.T, s Store, key string) int {
	t.Helper()
	v, _, found, err := s.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		return 0
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMemStoreEnvoyCASRules(t *testing.T) {
	s := NewMemStore()
	// cas != 0 on a missing key succeeds (Envoy does not check it).
	if err := s.Set("k", []byte("a"), 12345); err != nil {
		t.Fatalf("set missing key with cas: %v", err)
	}
	_, cas1, _, _ := s.Get("k")
	// A stale cas fails.
	if err := s.Set("k", []byte("b"), cas1+100); !errors.Is(err, ErrCasMismatch) {
		t.Fatalf("stale cas: got %v, want ErrCasMismatch", err)
	}
	// The current cas succeeds and issues a new, larger cas from the global counter.
	if err := s.Set("k", []byte("b"), cas1); err != nil {
		t.Fatal(err)
	}
	_, cas2, _, _ := s.Get("k")
	if cas2 <= cas1 {
		t.Fatalf("cas did not advance: %d -> %d", cas1, cas2)
	}
	// cas 0 is unconditional.
	if err := s.Set("k", []byte("c"), 0); err != nil {
		t.Fatal(err)
	}
	// The counter is process-global: another key's set takes the next value.
	_ = s.Set("other", []byte("x"), 0)
	_, casOther, _, _ := s.Get("other")
	_, cas3, _, _ := s.Get("k")
	if casOther != cas3+1 {
		t.Fatalf("global counter: k=%d other=%d", cas3, casOther)
	}
	// The creation CAS is held by the guard key, so it never matches another key.
	guard, _ := s.CreateCAS()
	if err := s.Set("k", []byte("d"), guard); !errors.Is(err, ErrCasMismatch) {
		t.Fatalf("create over existing key: got %v, want ErrCasMismatch", err)
	}
	if err := s.Set("fresh", []byte("d"), guard); err != nil {
		t.Fatalf("create missing key: %v", err)
	}
}

func TestUpdateInterleavedWritersLoseNothing(t *testing.T) {
	s := NewMemStore()
	// Before each of the first writer's sets, a second writer completes a whole update, as
	// another Envoy worker would between our Get and Set. The first writer must retry and
	// both increments must land exactly once.
	injected := 0
	var inner bool
	s.BeforeSet = func(key string) {
		if inner || injected >= 3 {
			return
		}
		inner = true
		injected++
		if _, err := Update(s, key, increment); err != nil {
			t.Errorf("inner update: %v", err)
		}
		inner = false
	}
	if _, err := Update(s, "c", increment); err != nil {
		t.Fatal(err)
	}
	// 3 injected increments (one before each losing attempt) + 1 from the outer writer.
	if got := counter(t, s, "c"); got != injected+1 {
		t.Fatalf("counter = %d, want %d (no lost or doubled update)", got, injected+1)
	}
}

func TestUpdateConcurrentCreationIsAtomic(t *testing.T) {
	s := NewMemStore()
	// Both writers read "missing"; the second creates the key between the first's Get and
	// Set. A blind create would overwrite it; the creation CAS makes the first retry.
	done := false
	s.BeforeSet = func(key string) {
		if done {
			return
		}
		done = true
		if _, err := Update(s, key, increment); err != nil {
			t.Errorf("inner update: %v", err)
		}
	}
	if _, err := Update(s, "new", increment); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, s, "new"); got != 2 {
		t.Fatalf("counter = %d, want 2", got)
	}
}

func TestUpdateManyGoroutines(t *testing.T) {
	s := NewMemStore()
	const workers, each = 8, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	contention := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				for {
					_, err := Update(s, "g", increment)
					if errors.Is(err, ErrContention) {
						mu.Lock()
						contention++
						mu.Unlock()
						continue // a caller that gives up retries from scratch here
					}
					if err != nil {
						t.Error(err)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	if got := counter(t, s, "g"); got != workers*each {
		t.Fatalf("counter = %d, want %d (contention give-ups: %d)", got, workers*each, contention)
	}
}

func TestUpdateKeepDeleteAndTombstone(t *testing.T) {
	s := NewMemStore()
	if _, err := Update(s, "k", increment); err != nil {
		t.Fatal(err)
	}
	casBefore := func() uint32 { _, c, _, _ := s.Get("k"); return c }()
	got, err := Update(s, "k", func([]byte, bool) ([]byte, Mutation, error) { return nil, Keep, nil })
	if err != nil || string(got) != "1" {
		t.Fatalf("keep: %q %v", got, err)
	}
	if _, c, _, _ := s.Get("k"); c != casBefore {
		t.Fatal("keep wrote")
	}
	if _, err := Update(s, "k", func([]byte, bool) ([]byte, Mutation, error) { return nil, Delete, nil }); err != nil {
		t.Fatal(err)
	}
	if _, c, found, _ := s.Get("k"); found || c == 0 {
		t.Fatalf("tombstone: found=%v cas=%d, want missing with a real cas", found, c)
	}
	// A deleted key is created again through its real CAS, not the creation CAS.
	if _, err := Update(s, "k", increment); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, s, "k"); got != 1 {
		t.Fatalf("recreated counter = %d, want 1", got)
	}
	if n := s.Keys(); n != 2 { // k and the guard
		t.Fatalf("live keys = %d, want 2", n)
	}
}

func TestUpdateGivesUpUnderEndlessContention(t *testing.T) {
	s := NewMemStore()
	_ = s.Set("k", []byte("1"), 0)
	var inner bool
	s.BeforeSet = func(key string) { // another writer always wins the race
		if inner {
			return
		}
		inner = true
		_ = s.Set(key, []byte("x"), 0)
		inner = false
	}
	_, err := Update(s, "k", func(cur []byte, _ bool) ([]byte, Mutation, error) { return []byte("y"), Write, nil })
	if !errors.Is(err, ErrContention) {
		t.Fatalf("got %v, want ErrContention", err)
	}
}

func TestCodecRoundTripAndCorruption(t *testing.T) {
	rec := NewEncoder(nil, 'T', 1).Uint(42).Int(-7).String("openai-a").Bytes()
	d := NewDecoder(rec, 'T', 1)
	if u, i, s := d.Uint(), d.Int(), d.String(); u != 42 || i != -7 || s != "openai-a" || d.Err() != nil {
		t.Fatalf("round trip: %d %d %q %v", u, i, s, d.Err())
	}
	cases := []struct {
		name string // what is wrong with the record
		data []byte // the stored bytes
	}{
		{"empty", nil},
		{"wrong kind", []byte{'X', 1, 0}},
		{"newer version", []byte{'T', 2, 0}},
		{"truncated varint", []byte{'T', 1, 0x80}},
		{"string past the end", []byte{'T', 1, 1, 1, 5, 'a'}},
		{"trailing bytes", append(append([]byte{}, rec...), 9)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoder(c.data, 'T', 1)
			_, _, _ = d.Uint(), d.Int(), d.String()
			if !errors.Is(d.Err(), ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", d.Err())
			}
		})
	}
}

func BenchmarkUpdateCounter(b *testing.B) {
	s := NewMemStore()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Update(s, "bench", increment); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDecoderView(t *testing.T) {
	rec := NewEncoder(nil, 'T', 1).String("claude-sonnet-4").Uint(7).Bytes()
	d := NewDecoder(rec, 'T', 1)
	if v := d.View(); string(v) != "claude-sonnet-4" || d.Uint() != 7 || d.Err() != nil {
		t.Fatalf("view %q, err %v", v, d.Err())
	}
	if n := testing.AllocsPerRun(100, func() {
		d := NewDecoder(rec, 'T', 1)
		if string(d.View()) != "claude-sonnet-4" {
			t.Fatal("view changed")
		}
	}); n != 0 {
		t.Fatalf("View allocates %v times", n)
	}
	bad := NewDecoder([]byte{'T', 1, 5, 'a'}, 'T', 1)
	if v := bad.View(); v != nil || !errors.Is(bad.Err(), ErrCorrupt) {
		t.Fatalf("view past the end: %q, %v", v, bad.Err())
	}
}
