package selection

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
)

// NewSeededSource returns a PCG source seeded once from crypto/rand (WASI random_get in
// the filter). It starts no goroutine and uses no timer.
func NewSeededSource() rand.Source {
	var seed [16]byte
	_, _ = crand.Read(seed[:]) // never fails: crypto/rand aborts the program instead
	return rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))
}
