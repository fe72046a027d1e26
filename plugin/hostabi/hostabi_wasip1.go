//go:build wasip1

package hostabi

import (
	"time"
	"unsafe"

	"github.com/spillwayproxy/spillway/internal/pairs"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// status codes of the ABI, mapped to the SDK's errors so callers test them the same way
// natively and in wasm.
const (
	statusOK          = 0
	statusNotFound    = 1
	statusBadArgument = 2
	statusEmpty       = 7
	statusCasMismatch = 8
	statusInternal    = 10
	statusUnsupported = 12
)

func statusErr(s uint32) error {
	switch s {
	case statusOK:
		return nil
	case statusNotFound:
		return types.ErrorStatusNotFound
	case statusBadArgument:
		return types.ErrorStatusBadArgument
	case statusEmpty:
		return types.ErrorStatusEmpty
	case statusCasMismatch:
		return types.ErrorStatusCasMismatch
	case statusInternal:
		return types.ErrorInternalFailure
	case statusUnsupported:
		return types.ErrorUnimplemented
	case statusForeign:
		return ErrForeignAddress
	}
	return errUnknownStatus
}

// Memory the host writes into. Envoy (WasmBase::copyToPointerSize) calls
// proxy_on_memory_allocate from inside a host call, copies the data into the returned
// memory and writes its address into the caller's out-parameter. A call made from this
// package turns the arena on first: the allocation then comes out of one reused block and
// the data is consumed before the next call. Any other allocation (the SDK's own calls)
// gets fresh Go memory, pinned in a small ring until the SDK turns the address back into a
// pointer (Claim), so a GC inside a nested allocation cannot free it.
//
// An address the host writes back is only read if this allocator handed it out during the
// call, with room for the size the host claims: anything else (a host bug, a corrupted
// out-parameter) is refused with ErrForeignAddress rather than read as raw memory.

var (
	arena       []byte
	arenaUsed   int
	arenaActive bool
	// arenaBlocks are the blocks handed out of the arena during the current call (Envoy
	// allocates once per call; a few more are remembered, any beyond are refused).
	arenaBlocks [4]struct{ off, n int }
	arenaHanded int
)

// maxKeptArena bounds the arena kept between calls: a rare large read (a big request body)
// does not pin its memory for the VM's life.
const maxKeptArena = 1 << 20

// maxAllocation is the largest block the host may ask for: Envoy gives a VM at most 1 GiB of
// memory (V8's --wasm_max_mem_pages in cpp-host), so a larger request cannot be met, and
// the Go runtime would die of it (out of memory is fatal, not a panic) instead of refusing.
const maxAllocation = 1 << 30

// statusForeign is endArena's status for a refused address (no ABI status has this value).
const statusForeign = 1<<32 - 1

// trimArena drops an arena grown past maxKeptArena, once its data has been consumed.
func trimArena() {
	if len(arena) > maxKeptArena {
		arena = nil
	}
}

const pinSlots = 8

var (
	pins    [pinSlots][]byte
	pinNext int
	pinned  bool // some pin is set: claimPin has something to clear
)

// onMemoryAllocate answers the host's proxy_on_memory_allocate. A block that cannot be had
// is nil (address 0), which Envoy reports to the guest's host call as a failed copy.
//
//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) *byte {
	n := int(size)
	if n > maxAllocation {
		return nil
	}
	if n == 0 { // Envoy never asks for 0, but &b[0] of an empty slice would panic
		n = 1
	}
	if arenaActive && (arenaUsed+n <= len(arena) || arenaUsed == 0) {
		// Every call made from this package has the host allocate once; the block grows
		// only when it is empty, so no pointer into the old one is ever owed.
		if arenaUsed+n > len(arena) {
			arena = make([]byte, max(2*len(arena), n, 4096))
		}
		if arenaHanded < len(arenaBlocks) {
			arenaBlocks[arenaHanded].off, arenaBlocks[arenaHanded].n = arenaUsed, n
			arenaHanded++
		}
		p := &arena[arenaUsed]
		arenaUsed += n
		return p
	}
	buf := make([]byte, n)
	pins[pinNext] = buf
	pinNext = (pinNext + 1) % pinSlots
	pinned = true
	return &buf[0]
}

// claimPin finds the pinned block the host wrote size bytes to at addr and releases every
// pin: once a host call has returned, no other buffer it allocated is still owed to the
// guest. ok is false when addr is not the start of a pinned block with room for size.
func claimPin(addr uint32, size int32) (b []byte, ok bool) {
	if !pinned { // the usual case: the call's data came from the arena
		return nil, false
	}
	pinned = false
	for i := range pins {
		if p := pins[i]; len(p) > 0 && uint32(uintptr(unsafe.Pointer(&p[0]))) == addr && size >= 0 && int(size) <= len(p) {
			b, ok = p[:size], true
		}
		pins[i] = nil
	}
	pinNext = 0
	return b, ok
}

// Claim turns a host-written address and size back into a Go pointer (the SDK bridge's
// out-params). ok is false for an address this allocator did not hand out, or too small a
// block for size: the caller must not read it. An empty answer (0, 0) is a nil pointer.
func Claim(addr uint32, size int32) (p *byte, ok bool) {
	b, found := claimPin(addr, size)
	switch {
	case found && len(b) > 0:
		return &b[0], true
	case found:
		return nil, true
	}
	return nil, addr == 0 && size == 0
}

// Out-params written by the host: package-level, not stack slots, because the goroutine
// stack may move during a nested proxy_on_memory_allocate, and a global costs no allocation.
var (
	retAddr uint32
	retSize int32
	retCas  uint32
)

// beginArena makes the next host allocation come from the arena.
func beginArena() {
	arenaActive, arenaUsed, arenaHanded = true, 0, 0
	retAddr, retSize = 0, 0
}

// endArena returns the data the host wrote (valid until the next beginArena): at the start
// of a block the arena handed out during the call, or of a block pinned during it (an
// allocation the arena had no room for), with room for its size; any other address is
// refused (statusForeign).
func endArena(status uint32) ([]byte, uint32) {
	arenaActive = false
	if status != statusOK || retSize <= 0 {
		claimPin(0, 0)
		return nil, status
	}
	if len(arena) > 0 {
		base := uintptr(unsafe.Pointer(&arena[0]))
		for _, b := range arenaBlocks[:arenaHanded] {
			if uintptr(retAddr) == base+uintptr(b.off) && int(retSize) <= b.n {
				claimPin(0, 0)
				return arena[b.off : b.off+int(retSize)], status
			}
		}
	}
	if b, ok := claimPin(retAddr, retSize); ok {
		return b, status
	}
	return nil, statusForeign
}

// Host imports (proxy-wasm ABI 0.2.x, i32 sizes). No //go:noescape: the host may call back
// into the guest (proxy_on_memory_allocate) during an import and the goroutine stack can
// move; pointers passed here point into the heap or into globals.

//go:wasmimport env proxy_get_header_map_pairs
func hostGetHeaderMapPairs(mapType MapType, retData *uint32, retSize *int32) uint32

//go:wasmimport env proxy_replace_header_map_value
func hostReplaceHeaderMapValue(mapType MapType, key *byte, keySize int32, value *byte, valueSize int32) uint32

//go:wasmimport env proxy_remove_header_map_value
func hostRemoveHeaderMapValue(mapType MapType, key *byte, keySize int32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func hostGetBufferBytes(bufferType BufferType, start int32, maxSize int32, retData *uint32, retSize *int32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func hostSetBufferBytes(bufferType BufferType, start int32, maxSize int32, data *byte, size int32) uint32

//go:wasmimport env proxy_get_shared_data
func hostGetSharedData(key *byte, keySize int32, retData *uint32, retSize *int32, retCas *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func hostSetSharedData(key *byte, keySize int32, value *byte, valueSize int32, cas uint32) uint32

//go:wasmimport env proxy_get_property
func hostGetProperty(path *byte, pathSize int32, retData *uint32, retSize *int32) uint32

//go:wasmimport env proxy_set_property
func hostSetProperty(path *byte, pathSize int32, value *byte, valueSize int32) uint32

//go:wasmimport env proxy_send_local_response
func hostSendLocalResponse(status uint32, details *byte, detailsSize int32, body *byte, bodySize int32,
	headers *byte, headersSize int32, grpcStatus int32) uint32

//go:wasmimport env proxy_continue_stream
func hostContinueStream(streamType StreamType) uint32

//go:wasmimport env proxy_close_stream
func hostCloseStream(streamType StreamType) uint32

//go:wasmimport env proxy_increment_metric
func hostIncrementMetric(metricID uint32, offset int64) uint32

//go:wasmimport env proxy_log
func hostLog(level uint32, message *byte, messageSize int32) uint32

//go:wasmimport env proxy_record_metric
func hostRecordMetric(metricID uint32, value uint64) uint32

//go:wasmimport wasi_snapshot_preview1 clock_time_get
func wasiClockTimeGet(clockID uint32, precision uint64, result *uint64) uint32

var clockNow uint64

// Now is the wall clock in one WASI call (time.Now reads the wall and the monotonic clock,
// two calls). The time carries no monotonic reading; the filter compares times across
// callbacks and workers, which only the wall clock can do anyway.
func Now() time.Time {
	if wasiClockTimeGet(0, 1, &clockNow) != 0 { // 0: CLOCK_REALTIME
		return time.Now()
	}
	return time.Unix(0, int64(clockNow))
}

// ptr returns a pointer to s's bytes for the host (nil for "").
func ptr(s string) *byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.StringData(s)
}

func bptr(b []byte) *byte {
	if len(b) == 0 {
		return nil
	}
	return &b[0]
}

// ReadPairs reads header map m into p.
func ReadPairs(m MapType, p *Pairs) error {
	beginArena()
	data, st := endArena(hostGetHeaderMapPairs(m, &retAddr, &retSize))
	if st != statusOK {
		p.Reset()
		return statusErr(st)
	}
	p.setFrom(data)
	trimArena()
	return nil
}

// ReplaceHeader sets name to value in map m (the first value replaced, others removed).
func ReplaceHeader(m MapType, name, value string) error {
	return statusErr(hostReplaceHeaderMapValue(m, ptr(name), int32(len(name)), ptr(value), int32(len(value))))
}

// RemoveHeader removes every value of name from map m.
func RemoveHeader(m MapType, name string) error {
	return statusErr(hostRemoveHeaderMapValue(m, ptr(name), int32(len(name))))
}

// ReadBuffer copies up to max bytes of buffer b from start into dst (reusing its memory)
// and returns them. When dst already has room for max bytes the host writes straight into
// it: a large body is not held twice.
func ReadBuffer(b BufferType, start, max int, dst []byte) ([]byte, error) {
	if max > 0 && cap(dst) >= max {
		kept := arena
		arena = dst[:cap(dst)]
		beginArena()
		data, st := endArena(hostGetBufferBytes(b, int32(start), int32(max), &retAddr, &retSize))
		arena = kept
		if st != statusOK {
			return dst[:0], statusErr(st)
		}
		if len(data) > 0 && &data[0] != &dst[:1][0] {
			return append(dst[:0], data...), nil // the host wrote somewhere else
		}
		return dst[:len(data)], nil
	}
	beginArena()
	data, st := endArena(hostGetBufferBytes(b, int32(start), int32(max), &retAddr, &retSize))
	if st != statusOK {
		return dst[:0], statusErr(st)
	}
	dst = append(dst[:0], data...)
	trimArena()
	return dst, nil
}

// ReplaceBuffer replaces buffer b with data.
func ReplaceBuffer(b BufferType, data []byte) error {
	return statusErr(hostSetBufferBytes(b, 0, 1<<31-1, bptr(data), int32(len(data))))
}

// GetSharedData reads key into dst (reusing its memory). A missing key is
// types.ErrorStatusNotFound.
func GetSharedData(key string, dst []byte) ([]byte, uint32, error) {
	beginArena()
	retCas = 0
	data, st := endArena(hostGetSharedData(ptr(key), int32(len(key)), &retAddr, &retSize, &retCas))
	if st != statusOK {
		return dst[:0], 0, statusErr(st)
	}
	dst = append(dst[:0], data...)
	trimArena()
	return dst, retCas, nil
}

// SetSharedData stores value under key if cas is 0 or matches.
func SetSharedData(key string, value []byte, cas uint32) error {
	return statusErr(hostSetSharedData(ptr(key), int32(len(key)), bptr(value), int32(len(value)), cas))
}

// GetProperty reads a property (path segments joined by NUL, see JoinPath) into dst.
func GetProperty(path []byte, dst []byte) ([]byte, error) {
	beginArena()
	data, st := endArena(hostGetProperty(bptr(path), int32(len(path)), &retAddr, &retSize))
	if st != statusOK {
		return dst[:0], statusErr(st)
	}
	return append(dst[:0], data...), nil
}

// SetProperty writes a property (path segments joined by NUL, see JoinPath): filter state
// under "wasm." + the path in Envoy (context.cc, Context::setProperty). It allocates
// nothing.
func SetProperty(path []byte, value string) error {
	return statusErr(hostSetProperty(bptr(path), int32(len(path)), ptr(value), int32(len(value))))
}

// SetPropertyBytes is SetProperty with the value in a byte slice, written as it is (no
// copy, no allocation).
func SetPropertyBytes(path, value []byte) error {
	return statusErr(hostSetProperty(bptr(path), int32(len(path)), bptr(value), int32(len(value))))
}

// SendLocalResponse sends a local reply; headers are encoded into *scratch.
func SendLocalResponse(status uint32, details string, body []byte, headers [][2]string, scratch *[]byte) error {
	*scratch = pairs.Append((*scratch)[:0], headers)
	return statusErr(hostSendLocalResponse(status, ptr(details), int32(len(details)), bptr(body), int32(len(body)),
		bptr(*scratch), int32(len(*scratch)), -1))
}

// ContinueStream resumes a paused direction (deferred by the host until the callback returns).
func ContinueStream(s StreamType) error { return statusErr(hostContinueStream(s)) }

// CloseStream resets the stream (deferred by the host until the callback returns; Envoy's
// Context::closeStream: encoder or decoder callbacks' resetStream).
func CloseStream(s StreamType) error { return statusErr(hostCloseStream(s)) }

// IncrementMetric adds delta to a counter.
func IncrementMetric(id uint32, delta int64) error { return statusErr(hostIncrementMetric(id, delta)) }

// Log writes message at level without copying it.
func Log(level LogLevel, message []byte) error {
	return statusErr(hostLog(uint32(level), bptr(message), int32(len(message))))
}

// SetGauge sets a gauge to v: proxy_record_metric on a gauge sets it (Envoy
// source/extensions/common/wasm/context.cc, Context::recordMetric: gauge->set(value)).
func SetGauge(id uint32, v uint64) error { return statusErr(hostRecordMetric(id, v)) }
