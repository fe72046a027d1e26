package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Buffers is the model's side of proxy_get_buffer_* and proxy_set_buffer_bytes.
type Buffers interface {
	// Buffer returns the buffer of type t visible in the running callback; mutable reports
	// whether the guest may set it, ok whether there is one.
	Buffer(t abi.BufferType) (b *[]byte, mutable, ok bool)
	// PluginConfiguration is what ABI 0.1.0's proxy_get_configuration answers.
	PluginConfiguration() []byte
}

func buffers() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "proxy_get_buffer_status", Params: sig(3, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			if u32(s[0]) > uint32(abi.BufferCallData) {
				st(s, abi.StatusBadArgument)
				return
			}
			b, _, ok := g.Buffer(abi.BufferType(u32(s[0])))
			if !ok {
				st(s, abi.StatusNotFound)
				return
			}
			writeU32(g, u32(s[1]), uint32(len(*b)))
			writeU32(g, u32(s[2]), 0)
			st(s, abi.StatusOK)
		}},
		{Name: "proxy_get_buffer_bytes", Params: sig(5, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, getBufferBytes(g, abi.BufferType(u32(s[0])), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		{Name: "proxy_set_buffer_bytes", Params: sig(5, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, setBufferBytes(g, abi.BufferType(u32(s[0])), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		// ABI 0.1.0 only.
		{Name: "proxy_get_configuration", Params: sig(2, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, wasm.CopyOut(g, g.PluginConfiguration(), u32(s[0]), u32(s[1])))
		}},
	}
}

func getBufferBytes(g Guest, t abi.BufferType, start, max, rp, rs uint32) abi.Status {
	if t > abi.BufferCallData {
		return abi.StatusBadArgument
	}
	b, _, ok := g.Buffer(t)
	if !ok {
		return abi.StatusNotFound
	}
	if uint64(start)+uint64(max) > 0xffffffff {
		return abi.StatusBadArgument
	}
	data := *b
	if start >= uint32(len(data)) {
		return wasm.CopyOut(g, nil, rp, rs)
	}
	end := start + max
	if end > uint32(len(data)) {
		end = uint32(len(data))
	}
	return wasm.CopyOut(g, data[start:end], rp, rs)
}

// setBufferBytes replaces the front of the buffer (start 0: drain length bytes, then
// prepend) or appends (start at or past the end); anything else is BadArgument.
func setBufferBytes(g Guest, t abi.BufferType, start, length, dp, dl uint32) abi.Status {
	if t > abi.BufferCallData {
		return abi.StatusBadArgument
	}
	b, mutable, ok := g.Buffer(t)
	if !ok {
		return abi.StatusNotFound
	}
	if !mutable {
		return abi.StatusBadArgument
	}
	data, okr := read(g, dp, dl)
	if !okr {
		return abi.StatusInvalidMemoryAccess
	}
	size := uint32(len(*b))
	switch {
	case start == 0:
		n := length
		if n > size {
			n = size
		}
		rest := (*b)[n:]
		nb := make([]byte, 0, len(data)+len(rest))
		nb = append(append(nb, data...), rest...)
		*b = nb
	case start >= size:
		*b = append(*b, data...)
	default:
		return abi.StatusBadArgument
	}
	return abi.StatusOK
}
