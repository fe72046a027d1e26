package engine

// cleanMemo remembers that every layer held nothing for one route candidate: no breaker
// record for its provider, no provider cooldown gate record for it or its connection, no
// cooldown record for its connection, no lockout index there. Such a candidate answers the
// same at any time — eligible — and a success changes nothing in any of its layers (each
// mechanism's contract: a healthy provider or connection has no stored record, and recording
// a success on one writes nothing).
//
// The memo is backed by the filter's per-VM state.Cache. Plan checks a candidate's layers
// and, when every read the check made found nothing (Cache.Findings did not move across it),
// notes the cache's Epoch, in the memo and in the Target it returns. While the epoch stands
// still the cache answers every key it read as it did then, so the same check would find
// nothing again: Plan, Dispatch's re-check and the breaker's probe decision, and a success's
// Record skip the candidate's layers instead of asking their mechanisms. The memo accepts
// exactly the cache's staleness, no more: the epoch moves on at the first Refresh after
// another worker's write or an admin reset (the filter refreshes before every routing
// decision, before a queued request's dispatch and before failover) and at every write this
// VM makes through the cache. Over a store that is not a Cache there are no memos, and every
// check reads.
type cleanMemo struct {
	at uint64 // the cache epoch the candidate was seen clean at; 0 = not known clean
	// model is the model it was checked for: a candidate without a model of its own serves
	// whichever model was requested, and the lockout is kept per model.
	model string
}

// vouches reports whether the memo vouches, at the cache's epoch (0 when there is no cache),
// that every layer holds nothing for the candidate serving model. fixed says the candidate
// has a model of its own, which model then always is.
func (m *cleanMemo) vouches(epoch uint64, fixed bool, model string) bool {
	return m.at != 0 && m.at == epoch && (fixed || m.model == model)
}

// note records a check of the candidate for model that found it eligible; at is
// Engine.cleanSince of the check (0 when it found something).
func (m *cleanMemo) note(at uint64, model string) { m.at, m.model = at, model }

// forget records a check that found something.
func (m *cleanMemo) forget() { m.at = 0 }

// epoch is the cache's epoch (0 when the store is not a Cache).
func (e *Engine) epoch() uint64 {
	if e.cache == nil {
		return 0
	}
	return e.cache.Epoch()
}

// stillClean reports whether a Target's clean mark (Target.clean) still vouches that its
// layers hold nothing.
func (e *Engine) stillClean(at uint64) bool { return at != 0 && at == e.epoch() }

// watch is the start of a check that may leave a clean memo.
type watch struct{ epoch, findings uint64 }

// watch starts watching a check's reads.
func (e *Engine) watch() watch {
	if e.cache == nil {
		return watch{}
	}
	return watch{epoch: e.cache.Epoch(), findings: e.cache.Findings()}
}

// cleanSince is the memo of a check that started at w and found its candidate eligible:
// the epoch, when every read the check made found nothing and the epoch stood still; else 0.
func (e *Engine) cleanSince(w watch) uint64 {
	if w.epoch == 0 || e.cache.Epoch() != w.epoch || e.cache.Findings() != w.findings {
		return 0
	}
	return w.epoch
}
