package state

import "errors"

// GenerationKey is the shared-data key every Cache bumps after writing a cached key. Its
// CAS is the generation: Envoy's CAS counter is process-global and every successful set takes
// a fresh value, so the CAS of this key changes whenever any worker writes anything cached.
var GenerationKey = KeyGeneration.Key()

// maxCacheEntries bounds what one VM remembers; past it the cache starts over. The engine's
// keys are bounded by the policy, so this only stops a runaway.
const maxCacheEntries = 8192

// Cache is a Store for one worker VM that remembers what it read, so a request on clean
// state reads one shared-data key (the generation) instead of one per mechanism record.
//
// Every write of a cached key goes to the underlying store and is followed by a bump of the
// generation key. Refresh, called once before each routing decision, reads the generation
// and forgets everything when another worker (or an admin reset) wrote since: the decision
// sees every write that completed before it started, as a read of each key would. Between
// two Refresh calls the cache may be stale by what other workers wrote meanwhile; that is
// safe for writes, which are compare-and-swap: a write based on a stale value fails with
// ErrCasMismatch, the key is forgotten, and state.Update's next attempt reads it afresh.
//
// Keys for which live reports true (counters that change on every request, such as
// concurrency leases and round-robin turns) bypass the cache entirely and never bump the
// generation, so they do not invalidate every other worker's cache on each request.
//
// Epoch and Findings let a caller remember conclusions drawn from what it read, not only
// the values: while the epoch stands still every key the cache read answers as it did, so a
// computation whose reads all found nothing (Findings unchanged across it) would find nothing
// again. The engine uses this to skip re-reading layers that hold no state for a target.
//
// A Cache is not safe for concurrent use: Envoy runs one callback at a time per VM.
type Cache struct {
	store    Store
	live     func(key string) bool // nil: no key is live
	entries  map[string]cacheEntry
	gen      uint32 // CAS of the generation key the entries were read under
	known    bool   // gen is a generation actually read (not invalidated by an own write)
	epoch    uint64 // moves on whenever a remembered value may change or go (see Epoch)
	findings uint64 // reads that found something (see Findings)
	stats    CacheStats
}

type cacheEntry struct {
	value []byte
	cas   uint32
	found bool
}

// CacheStats counts what a Cache did, for tests and benchmarks. Hits and Misses count the
// reads of remembered keys; LiveGets and LiveSets the reads and writes of live keys, which
// pass straight through.
type CacheStats struct {
	Hits, Misses, LiveGets, LiveSets, Refreshes, Flushes, Bumps, BumpErrors uint64
}

// NewCache wraps store. live selects the keys that bypass the cache (nil: none).
func NewCache(store Store, live func(key string) bool) *Cache {
	return &Cache{store: store, live: live, entries: make(map[string]cacheEntry, 64), epoch: 1}
}

var _ Store = (*Cache)(nil)

// Refresh reads the generation key and forgets every remembered value if it changed since
// they were read (or if this VM wrote since). It costs one shared-data read.
func (c *Cache) Refresh() error {
	c.stats.Refreshes++
	_, cas, _, err := c.store.Get(GenerationKey)
	if err != nil {
		c.flush()
		return err
	}
	if !c.known || cas != c.gen {
		c.flush()
		c.gen, c.known = cas, true
	}
	return nil
}

// Forget drops every remembered value; the next reads go to the store.
func (c *Cache) Forget() { c.flush() }

func (c *Cache) flush() {
	if len(c.entries) > 0 {
		c.stats.Flushes++
		clear(c.entries)
	}
	c.known = false
	c.epoch++
}

// Stats returns the counters.
func (c *Cache) Stats() CacheStats { return c.stats }

// Epoch identifies what the cache remembers. It moves on whenever a remembered value may
// change or go — a Refresh that starts over (another worker or an admin reset wrote, or this
// VM did), Forget, a write through the cache, the size bound — and at no other time. While
// it stands still, a key the cache read before answers as it did then. It is never 0.
func (c *Cache) Epoch() uint64 { return c.epoch }

// Findings counts the reads through the cache that found something: a value, a live key
// (never remembered, so never vouched for), or an error; a missing key and a deleted one (a
// tombstone, which reads as missing) are nothing. A caller that sees it unchanged across a computation knows that every read the
// computation made found nothing stored; while the Epoch also stands still, the same reads
// would find nothing again.
func (c *Cache) Findings() uint64 { return c.findings }

// isLive reports whether key bypasses the cache.
func (c *Cache) isLive(key string) bool { return c.live != nil && c.live(key) }

// Get implements Store. The returned value is shared with the cache: callers must not
// modify it (the engine's decoders only read).
func (c *Cache) Get(key string) ([]byte, uint32, bool, error) {
	if c.isLive(key) {
		c.stats.LiveGets++
		c.findings++
		return c.store.Get(key)
	}
	if e, ok := c.entries[key]; ok {
		c.stats.Hits++
		if e.found {
			c.findings++
		}
		return e.value, e.cas, e.found, nil
	}
	c.stats.Misses++
	v, cas, found, err := c.store.Get(key)
	if err != nil {
		c.findings++
		return nil, 0, false, err
	}
	if found {
		c.findings++
	}
	if len(c.entries) >= maxCacheEntries {
		clear(c.entries)
		c.epoch++
	}
	if v != nil {
		v = append([]byte(nil), v...) // the store may reuse its memory; the cache keeps a copy
	}
	c.entries[key] = cacheEntry{value: v, cas: cas, found: found}
	return v, cas, found, nil
}

// Set implements Store: the write goes to the store; then the key is forgotten (its new CAS
// is unknown) and the generation bumped so every other worker's next Refresh sees it.
func (c *Cache) Set(key string, value []byte, cas uint32) error {
	if c.isLive(key) {
		c.stats.LiveSets++
		return c.store.Set(key, value, cas)
	}
	delete(c.entries, key)
	c.epoch++ // even a failed write forgets the key
	if err := c.store.Set(key, value, cas); err != nil {
		return err
	}
	c.known = false // our own generation bump below makes our next Refresh start over
	c.stats.Bumps++
	if err := c.bump(); err != nil {
		// The write itself succeeded; other workers see it once their entries go (the next
		// write anyone makes bumps the generation again).
		c.stats.BumpErrors++
	}
	return nil
}

// bump moves the generation on. Envoy takes cas 0 as unconditional, so one set does it; a
// host that refuses cas 0 on an existing key (the SDK's proxytest does) gets the key's CAS
// read back and a compare-and-swap.
func (c *Cache) bump() error {
	err := c.store.Set(GenerationKey, []byte{1}, 0)
	for attempt := 0; errors.Is(err, ErrCasMismatch) && attempt < MaxCASAttempts; attempt++ {
		var cas uint32
		if _, cas, _, err = c.store.Get(GenerationKey); err == nil {
			err = c.store.Set(GenerationKey, []byte{1}, cas)
		}
	}
	return err
}

// CreateCAS implements Store.
func (c *Cache) CreateCAS() (uint32, error) { return c.store.CreateCAS() }
