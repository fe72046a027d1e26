package wasm

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

// Guest is the calling guest as the memory helpers need it: its linear memory and its
// allocator.
type Guest interface {
	// Memory is the guest's linear memory.
	Memory() api.Memory
	// Place allocates n bytes in the guest (its malloc or proxy_on_memory_allocate) for
	// data the host hands over and returns where the data goes, 0 when it got no memory.
	Place(n uint32) uint32
}

// Read returns a view of n bytes of guest memory at p, valid until the guest runs again;
// ok is false when the range is outside the memory.
func Read(m api.Memory, p, n uint32) (b []byte, ok bool) {
	if n == 0 {
		return nil, true
	}
	return m.Read(p, n)
}

// CopyOut hands data to the guest like cpp-host's copyToPointerSize (include/proxy-wasm/
// wasm.h): allocate in the guest, copy, write the address and size to the out-params. Empty
// data gives (0, 0); an allocator that returns no memory (address 0) fails the call with
// InvalidMemoryAccess, as allocMemory's nullptr does there.
func CopyOut(g Guest, data []byte, ptrPtr, sizePtr uint32) abi.Status {
	mem := g.Memory()
	var addr uint32
	if len(data) > 0 {
		addr = g.Place(uint32(len(data)))
		if addr == 0 || !mem.Write(addr, data) {
			return abi.StatusInvalidMemoryAccess
		}
	}
	if !mem.WriteUint32Le(ptrPtr, addr) || !mem.WriteUint32Le(sizePtr, uint32(len(data))) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}

// CopyOutString is CopyOut for a string, without converting it to a byte slice.
func CopyOutString(g Guest, data string, ptrPtr, sizePtr uint32) abi.Status {
	mem := g.Memory()
	var addr uint32
	if len(data) > 0 {
		addr = g.Place(uint32(len(data)))
		if addr == 0 || !mem.WriteString(addr, data) {
			return abi.StatusInvalidMemoryAccess
		}
	}
	if !mem.WriteUint32Le(ptrPtr, addr) || !mem.WriteUint32Le(sizePtr, uint32(len(data))) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}
