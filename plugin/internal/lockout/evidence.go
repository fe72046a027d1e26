package lockout

import (
	"hash/maphash"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
)

// Evidence is how far a model name the policy does not name has shown itself to be a real
// model of the connection's provider. It ranks the lockouts that share the connection's pool
// slots: a newcomer may take a slot only from a holder with no more evidence than its own.
type Evidence uint8

// Evidence levels, weakest first. The values are stored in shared data.
const (
	// EvidenceNone: nothing says the model exists — the provider refused it as unknown (not
	// found, a bad request about the model) or failed it in a way any name can be failed
	// (a server error, a timeout, a truncated stream, a refusal).
	EvidenceNone Evidence = iota
	// EvidenceMetered: the provider rate-limited it, found its quota exhausted, its
	// concurrency spent or the model overloaded — it meters or runs that model.
	EvidenceMetered
	// EvidenceServed: the provider served the model on this connection (a success recorded
	// for it, Failure.Served).
	EvidenceServed
)

// EvidenceOf is the evidence of one failure of a model: served when the caller has seen the
// provider serve it (Failure.Served), metered for the reasons only a model the provider
// meters or runs gets, none otherwise.
func EvidenceOf(r failure.Reason, served bool) Evidence {
	switch {
	case served:
		return EvidenceServed
	case r == failure.ReasonRateLimit, r == failure.ReasonQuotaExhausted,
		r == failure.ReasonConcurrencyLimited, r == failure.ReasonModelCapacity:
		return EvidenceMetered
	}
	return EvidenceNone
}

// ServedMemory is how many model names a Served remembers.
const ServedMemory = 16

// Served is one worker's memory of the models a connection's provider has served: the
// evidence behind Failure.Served. It holds a fixed number of names, as seeded hashes (a
// client cannot craft a name that collides with a served one without the seed), and when
// full forgets the one served least recently, so a model in use stays remembered however
// many others are served. It lives in the worker's memory, never in shared data: noting a
// success costs no shared-data operation. Its zero value is ready to use; it is not safe for
// concurrent use (one worker's callbacks run one after another).
type Served struct {
	seed  maphash.Seed
	ready bool
	hash  [ServedMemory]uint64
	last  [ServedMemory]uint64 // when each entry was last noted (clock); 0 = empty
	clock uint64
}

// Note remembers that the provider served model.
func (s *Served) Note(model string) {
	if !s.ready {
		s.seed, s.ready = maphash.MakeSeed(), true
	}
	h := maphash.String(s.seed, model)
	s.clock++
	oldest := 0
	for i := range s.hash {
		if s.last[i] != 0 && s.hash[i] == h {
			s.last[i] = s.clock
			return
		}
		if s.last[i] < s.last[oldest] {
			oldest = i
		}
	}
	s.hash[oldest], s.last[oldest] = h, s.clock
}

// Has reports whether model is remembered as served.
func (s *Served) Has(model string) bool {
	if !s.ready {
		return false
	}
	h := maphash.String(s.seed, model)
	for i := range s.hash {
		if s.last[i] != 0 && s.hash[i] == h {
			return true
		}
	}
	return false
}
