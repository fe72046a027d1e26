package state

import (
	"errors"
	"strings"
	"testing"
)

// countingStore counts the operations that reach the shared store.
type countingStore struct {
	Store
	gets, sets int
}

func (c *countingStore) Get(key string) ([]byte, uint32, bool, error) {
	c.gets++
	return c.Store.Get(key)
}

func (c *countingStore) Set(key string, value []byte, cas uint32) error {
	c.sets++
	return c.Store.Set(key, value, cas)
}

func liveAdm(key string) bool { return strings.HasPrefix(key, KeyPrefix+"adm:") }

func TestCacheReadsEachKeyOncePerGeneration(t *testing.T) {
	shared := &countingStore{Store: NewMemStore()}
	c := NewCache(shared, liveAdm)
	if err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		for _, k := range []string{"spw1:br:a", "spw1:cc:a:1", "spw1:cc:a:2"} {
			if _, _, found, err := c.Get(k); err != nil || found {
				t.Fatalf("Get(%s) = found %v, %v; want a missing key", k, found, err)
			}
		}
	}
	if shared.gets != 1+3 {
		t.Fatalf("store saw %d gets for 3 keys read 3 times plus one refresh, want 4", shared.gets)
	}
	// A later refresh with nothing written costs exactly one read and keeps everything.
	shared.gets = 0
	if err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	c.Get("spw1:br:a")
	if shared.gets != 1 {
		t.Fatalf("refresh on an unchanged generation cost %d gets, want 1", shared.gets)
	}
}

func TestCacheSeesAnotherWorkersWriteAfterRefresh(t *testing.T) {
	mem := NewMemStore()
	a, b := NewCache(mem, nil), NewCache(mem, nil)
	for _, c := range []*Cache{a, b} {
		if err := c.Refresh(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, found, _ := b.Get("spw1:k"); found {
		t.Fatal("key present before any write")
	}
	if _, err := Update(a, "spw1:k", func([]byte, bool) ([]byte, Mutation, error) {
		return []byte("v1"), Write, nil
	}); err != nil {
		t.Fatal(err)
	}
	// Before its refresh, b may still answer from what it read (stale by design)...
	if _, _, found, _ := b.Get("spw1:k"); found {
		t.Fatal("b saw the write without a refresh: the cache did not cache the miss")
	}
	// ...and after it, b sees the write.
	if err := b.Refresh(); err != nil {
		t.Fatal(err)
	}
	if v, _, found, _ := b.Get("spw1:k"); !found || string(v) != "v1" {
		t.Fatalf("after refresh b reads %q found=%v, want v1", v, found)
	}
	// The writer itself starts over too: its own write bumped the generation.
	if err := a.Refresh(); err != nil {
		t.Fatal(err)
	}
	if v, _, _, _ := a.Get("spw1:k"); string(v) != "v1" {
		t.Fatalf("writer reads %q after its own write, want v1", v)
	}
}

func TestCacheStaleWriteRetriesWithAFreshRead(t *testing.T) {
	mem := NewMemStore()
	a, b := NewCache(mem, nil), NewCache(mem, nil)
	a.Refresh()
	b.Refresh()
	incr := func(cur []byte, found bool) ([]byte, Mutation, error) {
		n := byte(0)
		if found {
			n = cur[0]
		}
		return []byte{n + 1}, Write, nil
	}
	b.Get("spw1:n") // b caches the missing key
	if _, err := Update(a, "spw1:n", incr); err != nil {
		t.Fatal(err)
	}
	// b's cached view is stale (missing), and its CAS 0 makes the write a create, which the
	// creation CAS refuses because the key exists: the update must retry with a fresh read.
	if _, err := Update(b, "spw1:n", incr); err != nil {
		t.Fatal(err)
	}
	v, _, _, _ := mem.Get("spw1:n")
	if len(v) != 1 || v[0] != 2 {
		t.Fatalf("counter = %v after two increments from two workers, want [2] (an update was lost)", v)
	}
}

func TestCacheLiveKeysBypassAndDoNotBump(t *testing.T) {
	shared := &countingStore{Store: NewMemStore()}
	c := NewCache(shared, liveAdm)
	c.Refresh()
	key := KeyPrefix + "adm:c:1"
	for i := 0; i < 2; i++ {
		if _, err := Update(c, key, func([]byte, bool) ([]byte, Mutation, error) { return []byte{1}, Write, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if shared.gets != 1+2 || shared.sets != 2 {
		t.Fatalf("live key: %d gets, %d sets; want 3 gets (refresh + one per update) and 2 sets (no generation bump)",
			shared.gets, shared.sets)
	}
	if st := c.Stats(); st.Bumps != 0 {
		t.Fatalf("live writes bumped the generation %d times", st.Bumps)
	}
}

func TestCacheStoreErrorsFlush(t *testing.T) {
	boom := errors.New("host down")
	s := &failingStore{Store: NewMemStore()}
	c := NewCache(s, nil)
	c.Refresh()
	c.Get("spw1:x")
	s.err = boom
	if err := c.Refresh(); !errors.Is(err, boom) {
		t.Fatalf("Refresh error = %v, want the store's", err)
	}
	if _, _, _, err := c.Get("spw1:x"); !errors.Is(err, boom) {
		t.Fatalf("Get after a failed refresh answered from the cache (err %v); it must go to the store", err)
	}
}

type failingStore struct {
	Store
	err error
}

func (f *failingStore) Get(key string) ([]byte, uint32, bool, error) {
	if f.err != nil {
		return nil, 0, false, f.err
	}
	return f.Store.Get(key)
}

// bumpFailingStore refuses every write of the generation key.
type bumpFailingStore struct{ Store }

func (b *bumpFailingStore) Set(key string, value []byte, cas uint32) error {
	if key == GenerationKey {
		return errors.New("no")
	}
	return b.Store.Set(key, value, cas)
}

func TestCacheWriteSucceedsWhenTheGenerationBumpFails(t *testing.T) {
	mem := NewMemStore()
	c := NewCache(&bumpFailingStore{Store: mem}, nil)
	c.Refresh()
	if err := c.Set("spw1:k", []byte("v"), 0); err != nil {
		t.Fatalf("Set = %v: the key was written, only the generation bump failed", err)
	}
	if v, _, _, _ := mem.Get("spw1:k"); string(v) != "v" {
		t.Fatalf("stored %q", v)
	}
	if st := c.Stats(); st.BumpErrors != 1 {
		t.Fatalf("bump errors %d, want 1", st.BumpErrors)
	}
}

// casZeroRefusingStore refuses cas 0 on an existing key, as the SDK's proxytest does.
type casZeroRefusingStore struct{ *MemStore }

func (s casZeroRefusingStore) Set(key string, value []byte, cas uint32) error {
	if _, _, _, err := s.MemStore.Get(key); err == nil && cas == 0 {
		if _, c, found, _ := s.MemStore.Get(key); found || c != 0 {
			return ErrCasMismatch
		}
	}
	return s.MemStore.Set(key, value, cas)
}

func TestCacheBumpsOnAHostThatRefusesUnconditionalSets(t *testing.T) {
	s := casZeroRefusingStore{NewMemStore()}
	a, b := NewCache(s, nil), NewCache(s, nil)
	a.Refresh()
	b.Refresh()
	b.Get("spw1:k")
	for i := byte(1); i <= 2; i++ {
		if err := a.Set("spw1:k", []byte{i}, 0); err != nil && !errors.Is(err, ErrCasMismatch) {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.BumpErrors != 0 {
		t.Fatalf("bump errors %d: the CAS fallback did not bump", st.BumpErrors)
	}
	b.Refresh()
	if _, _, found, _ := b.Get("spw1:k"); !found {
		t.Fatal("the other worker did not see the write after its refresh")
	}
}

// Epoch moves whenever a remembered value may change or go, and at no other time; Findings
// moves on every read that finds something (a value, a live key, an error) and on no read
// of a missing or deleted key. Together they let a caller trust a conclusion drawn from
// reads that found nothing for as long as the epoch stands.
func TestCacheEpochAndFindings(t *testing.T) {
	write := func(c *Cache, key string, v []byte) {
		t.Helper()
		if _, err := Update(c, key, func([]byte, bool) ([]byte, Mutation, error) { return v, Write, nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		act      func(t *testing.T, c, peer *Cache, mem *MemStore) // what happens after a warm-up
		epoch    bool                                              // the epoch must move
		findings uint64                                            // how far Findings must move
	}{
		{name: "reads of missing keys, again and again", act: func(t *testing.T, c, _ *Cache, _ *MemStore) {
			for i := 0; i < 3; i++ {
				c.Get("spw1:missing")
				c.Get("spw1:other-missing")
			}
		}},
		{name: "a refresh with nothing written anywhere", act: func(t *testing.T, c, _ *Cache, _ *MemStore) {
			if err := c.Refresh(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a deleted key reads as missing", act: func(t *testing.T, c, _ *Cache, mem *MemStore) {
			c.Get("spw1:tombstone")
		}},
		{name: "a read that finds a value", act: func(t *testing.T, c, _ *Cache, _ *MemStore) {
			c.Get("spw1:present")
			c.Get("spw1:present") // a hit finds it too
		}, findings: 2},
		{name: "a live key is never vouched for", act: func(t *testing.T, c, _ *Cache, _ *MemStore) {
			c.Get(KeyPrefix + "adm:c:1")
		}, findings: 1},
		{name: "a write through the cache", act: func(t *testing.T, c, _ *Cache, _ *MemStore) {
			write(c, "spw1:missing", []byte{7})
		}, epoch: true},
		{name: "a live write leaves what the cache remembers alone", act: func(t *testing.T, c, _ *Cache, _ *MemStore) {
			if err := c.Set(KeyPrefix+"adm:c:1", []byte{1}, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "another worker's write, seen at the next refresh", act: func(t *testing.T, c, peer *Cache, _ *MemStore) {
			write(peer, "spw1:missing", []byte{7})
			if err := c.Refresh(); err != nil {
				t.Fatal(err)
			}
		}, epoch: true},
		{name: "Forget", act: func(t *testing.T, c, _ *Cache, _ *MemStore) { c.Forget() }, epoch: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := NewMemStore()
			c, peer := NewCache(mem, liveAdm), NewCache(mem, liveAdm)
			write(peer, "spw1:present", []byte{1})
			write(peer, "spw1:tombstone", []byte{1})
			if _, err := Update(peer, "spw1:tombstone", func([]byte, bool) ([]byte, Mutation, error) { return nil, Delete, nil }); err != nil {
				t.Fatal(err)
			}
			if err := c.Refresh(); err != nil {
				t.Fatal(err)
			}
			c.Get("spw1:missing") // warm: the key the cases read again
			epoch, findings := c.Epoch(), c.Findings()
			if epoch == 0 {
				t.Fatal("epoch 0: it must never be 0")
			}
			tc.act(t, c, peer, mem)
			if moved := c.Epoch() != epoch; moved != tc.epoch {
				t.Errorf("epoch moved = %v, want %v", moved, tc.epoch)
			}
			if got := c.Findings() - findings; got != tc.findings {
				t.Errorf("findings moved by %d, want %d", got, tc.findings)
			}
		})
	}
}

// The size bound starts the cache over, which moves the epoch.
func TestCacheSizeBoundMovesTheEpoch(t *testing.T) {
	c := NewCache(NewMemStore(), nil)
	if err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	epoch := c.Epoch()
	for i := 0; i < maxCacheEntries; i++ {
		c.Get(KeyPrefix + "k" + string(rune('a'+i%26)) + strings.Repeat("x", i/26))
	}
	if c.Epoch() != epoch {
		t.Fatalf("epoch moved before the bound was reached")
	}
	c.Get(KeyPrefix + "one-too-many")
	if c.Epoch() == epoch {
		t.Fatal("the cache started over at its size bound and the epoch stood still")
	}
}
