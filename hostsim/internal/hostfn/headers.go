package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// HeaderMaps is the model's side of proxy_*_header_map_*: which map the guest may see now.
// Keys in the model's maps are lower case, as in Envoy's header maps; the functions keep
// them so.
type HeaderMaps interface {
	// HeaderMap returns the map of type t visible in the running callback (mutable: for a
	// write). Outside its phase it answers BadArgument; a missing one NotFound.
	HeaderMap(t abi.MapType, mutable bool) (*[][2]string, abi.Status)
	// Scratch is a buffer the functions may reuse between calls.
	Scratch() *[]byte
}

// mapOp is a header map write.
type mapOp int

const (
	mapAdd     mapOp = iota // addCopy: appends a duplicate
	mapReplace              // setCopy: first value replaced, the others removed
	mapRemove               // removes every value
)

func headerMaps() []wasm.Func[Guest] {
	mapType := func(v uint64) abi.MapType { return abi.MapType(u32(v)) }
	return []wasm.Func[Guest]{
		{Name: "proxy_get_header_map_value", Params: sig(5, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, getHeaderMapValue(g, mapType(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		{Name: "proxy_add_header_map_value", Params: sig(5, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, mutateHeaderMap(g, mapAdd, mapType(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		{Name: "proxy_replace_header_map_value", Params: sig(5, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, mutateHeaderMap(g, mapReplace, mapType(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		{Name: "proxy_remove_header_map_value", Params: sig(3, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, mutateHeaderMap(g, mapRemove, mapType(s[0]), u32(s[1]), u32(s[2]), 0, 0))
		}},
		{Name: "proxy_get_header_map_pairs", Params: sig(3, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, getHeaderMapPairs(g, mapType(s[0]), u32(s[1]), u32(s[2])))
		}},
		{Name: "proxy_set_header_map_pairs", Params: sig(3, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, setHeaderMapPairs(g, mapType(s[0]), u32(s[1]), u32(s[2])))
		}},
		{Name: "proxy_get_header_map_size", Params: sig(2, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			m, result := g.HeaderMap(mapType(s[0]), false)
			if result != abi.StatusOK {
				st(s, result)
				return
			}
			if !writeU32(g, u32(s[1]), uint32(abi.PairsByteSize(*m))) {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			st(s, abi.StatusOK)
		}},
	}
}

func getHeaderMapValue(g Guest, t abi.MapType, kp, kl, vp, vs uint32) abi.Status {
	m, result := g.HeaderMap(t, false)
	if result != abi.StatusOK {
		return result
	}
	key, ok := read(g, kp, kl)
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	for _, kv := range *m {
		if abi.EqualLower(kv[0], key) {
			return wasm.CopyOutString(g, kv[1], vp, vs)
		}
	}
	return abi.StatusNotFound
}

func mutateHeaderMap(g Guest, op mapOp, t abi.MapType, kp, kl, vp, vl uint32) abi.Status {
	m, result := g.HeaderMap(t, true)
	if result != abi.StatusOK {
		return result
	}
	key, ok1 := read(g, kp, kl)
	val, ok2 := read(g, vp, vl)
	if !ok1 || !ok2 {
		return abi.StatusInvalidMemoryAccess
	}
	k := abi.LowerASCII(string(key))
	switch op {
	case mapAdd:
		*m = append(*m, [2]string{k, string(val)})
	case mapReplace:
		found := false
		out := (*m)[:0]
		for _, kv := range *m {
			if kv[0] == k {
				if found {
					continue
				}
				found = true
				kv[1] = string(val)
			}
			out = append(out, kv)
		}
		if !found {
			out = append(out, [2]string{k, string(val)})
		}
		*m = out
	case mapRemove:
		out := (*m)[:0]
		for _, kv := range *m {
			if kv[0] != k {
				out = append(out, kv)
			}
		}
		*m = out
	}
	return abi.StatusOK
}

func getHeaderMapPairs(g Guest, t abi.MapType, rp, rs uint32) abi.Status {
	m, result := g.HeaderMap(t, false)
	if result != abi.StatusOK {
		// An unavailable map reads as empty.
		if !writeU32(g, rp, 0) || !writeU32(g, rs, 0) {
			return abi.StatusInvalidMemoryAccess
		}
		return abi.StatusOK
	}
	if len(*m) == 0 { // cpp-host hands over nothing for an empty map
		return wasm.CopyOut(g, nil, rp, rs)
	}
	scratch := g.Scratch()
	*scratch = abi.AppendPairs((*scratch)[:0], *m)
	return wasm.CopyOut(g, *scratch, rp, rs)
}

func setHeaderMapPairs(g Guest, t abi.MapType, p, n uint32) abi.Status {
	m, result := g.HeaderMap(t, true)
	if result != abi.StatusOK {
		return result
	}
	b, ok := read(g, p, n)
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	pairs, _ := abi.DecodePairs(b)
	*m = (*m)[:0]
	for _, kv := range pairs {
		*m = append(*m, [2]string{abi.LowerASCII(kv[0]), kv[1]})
	}
	return abi.StatusOK
}
