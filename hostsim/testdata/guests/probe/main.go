// Command probe is a raw proxy-wasm guest (no SDK) for hostsim's self-tests. Its callbacks
// run a script taken from the VM configuration (during proxy_on_vm_start), the plugin
// configuration (during proxy_on_configure) and the PROBE_INIT environment variable
// (during _initialize), and log every callback and every host call's status, so tests can
// assert exact ABI behaviour and callback order from the host's logs.
//
// The plugin configuration's lines apply to that plugin's contexts only (a VM may host two
// plugins, each with its own root context and configuration); the VM configuration's and
// PROBE_INIT's to every context.
//
// Script lines: "<callback>[@<context id>] <op> <args...>", e.g.
//
//	request_headers get_header 0 :path
//	request_headers ret 1
//	http_call_response@1 effective 2
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o probe.wasm .
package main

import (
	"encoding/binary"
	"encoding/hex"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

func main() {}

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg *byte, size uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(mt uint32, key *byte, keySize uint32, retPtr *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAddHeaderMapValue(mt uint32, key *byte, keySize uint32, val *byte, valSize uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeaderMapValue(mt uint32, key *byte, keySize uint32, val *byte, valSize uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(mt uint32, key *byte, keySize uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderMapPairs(mt uint32, retPtr *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_header_map_pairs
func proxySetHeaderMapPairs(mt uint32, data *byte, size uint32) uint32

//go:wasmimport env proxy_get_header_map_size
func proxyGetHeaderMapSize(mt uint32, ret *uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(bt uint32, start uint32, max uint32, retPtr *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(bt uint32, start uint32, length uint32, data *byte, size uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(st uint32) uint32

//go:wasmimport env proxy_close_stream
func proxyCloseStream(st uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(code uint32, det *byte, detSize uint32, body *byte, bodySize uint32, hdrs *byte, hdrsSize uint32, grpc int32) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(up *byte, upSize uint32, hdrs *byte, hdrsSize uint32, body *byte, bodySize uint32, tr *byte, trSize uint32, timeout uint32, token *uint32) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(key *byte, keySize uint32, retPtr *uint32, retSize *uint32, cas *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(key *byte, keySize uint32, val *byte, valSize uint32, cas uint32) uint32

//go:wasmimport env proxy_register_shared_queue
func proxyRegisterSharedQueue(name *byte, size uint32, token *uint32) uint32

//go:wasmimport env proxy_resolve_shared_queue
func proxyResolveSharedQueue(vmID *byte, vmIDSize uint32, name *byte, size uint32, token *uint32) uint32

//go:wasmimport env proxy_enqueue_shared_queue
func proxyEnqueueSharedQueue(token uint32, val *byte, size uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
func proxyDequeueSharedQueue(token uint32, retPtr *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriod(ms uint32) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(path *byte, size uint32, retPtr *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_property
func proxySetProperty(path *byte, size uint32, val *byte, valSize uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(mt uint32, name *byte, size uint32, id *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, offset int64) uint32

//go:wasmimport env proxy_record_metric
func proxyRecordMetric(id uint32, value uint64) uint32

//go:wasmimport env proxy_get_metric
func proxyGetMetric(id uint32, value *uint64) uint32

//go:wasmimport env proxy_set_effective_context
func proxySetEffectiveContext(id uint32) uint32

//go:wasmimport env proxy_done
func proxyDone() uint32

//go:wasmimport env proxy_get_status
func proxyGetStatus(code *uint32, retPtr *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_call_foreign_function
func proxyCallForeign(name *byte, size uint32, args *byte, argsSize uint32, retPtr *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_get_current_time_nanoseconds
func proxyGetCurrentTime(ret *uint64) uint32

// Out-params live in globals: the host may call proxy_on_memory_allocate during an import,
// and the goroutine stack can move meanwhile.
var (
	retPtr, retSize, retU32 uint32
	retU64                  uint64
	pins                    [][]byte
)

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) *byte {
	switch mallocHook {
	case "log": // allowed inside malloc
		logf(0, "malloc hook")
	case "now": // clock_time_get: allowed inside malloc
		_ = time.Now()
	case "shared": // not allowed: traps with restricted_callback
		k, kn := ptr("malloc-hook")
		proxySetSharedData(k, kn, nil, 0, 0)
	}
	if size == 0 {
		size = 1
	}
	b := make([]byte, size)
	pins = append(pins, b)
	return &b[0]
}

// taken copies what the host handed over and releases the pins.
func taken() string {
	var s string
	if retPtr != 0 && retSize != 0 {
		s = string(unsafe.Slice((*byte)(unsafe.Pointer(uintptr(retPtr))), retSize))
	}
	pins = pins[:0]
	retPtr, retSize = 0, 0
	return s
}

func ptr(s string) (*byte, uint32) {
	if len(s) == 0 {
		return nil, 0
	}
	b := []byte(s)
	return &b[0], uint32(len(b))
}

func logf(level uint32, msg string) {
	p, n := ptr(msg)
	proxyLog(level, p, n)
}

var statusNames = []string{"Ok", "NotFound", "BadArgument", "SerializationFailure", "ParseFailure",
	"BadExpression", "InvalidMemoryAccess", "Empty", "CasMismatch", "ResultMismatch", "InternalFailure",
	"BrokenConnection", "Unimplemented"}

func status(s uint32) string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "Status" + strconv.Itoa(int(s))
}

// show renders a value for the log: printable text as is, anything else as hex.
func show(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			const hexd = "0123456789abcdef"
			out := []byte("0x")
			for j := 0; j < len(s); j++ {
				out = append(out, hexd[s[j]>>4], hexd[s[j]&15])
			}
			return string(out)
		}
	}
	return s
}

// ---------------------------------------------------------------------------------------
// Script

type step struct {
	ctx  uint32 // 0: any context
	root uint32 // 0: any plugin; else only contexts of this root context's plugin
	args []string
}

var (
	script = map[string][]step{}
	vars   = map[string]uint32{}
	curCtx uint32
	result uint32
	// rootOf maps each context to its plugin's root context (from proxy_on_context_create;
	// a root is its own), so a VM hosting two plugins runs each one's configure script on
	// its own contexts only.
	rootOf   = map[uint32]uint32{}
	vmParsed bool
)

func parse(cfg string) { parseFor(cfg, 0) }

// parseFor adds the script lines of cfg, limited to root's plugin unless root is 0.
func parseFor(cfg string, root uint32) {
	for _, line := range strings.Split(cfg, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		cb, ctx := f[0], uint32(0)
		if i := strings.IndexByte(cb, '@'); i >= 0 {
			n, _ := strconv.Atoi(cb[i+1:])
			cb, ctx = cb[:i], uint32(n)
		}
		script[cb] = append(script[cb], step{ctx: ctx, root: root, args: f[1:]})
	}
}

func num(s string) uint32 {
	if strings.HasPrefix(s, "$") {
		if s == "$ctx" {
			return curCtx
		}
		return vars[s[1:]]
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return uint32(n)
}

func pairs(s string) []byte {
	var kv [][2]string
	if s != "-" && s != "" {
		for _, p := range strings.Split(s, ",") {
			k, v, _ := strings.Cut(p, "=")
			kv = append(kv, [2]string{k, v})
		}
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(kv)))
	for _, p := range kv {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p[0])))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p[1])))
	}
	for _, p := range kv {
		b = append(append(append(append(b, p[0]...), 0), p[1]...), 0)
	}
	return b
}

func unpairs(s string) string {
	b := []byte(s)
	if len(b) < 4 {
		return ""
	}
	n := binary.LittleEndian.Uint32(b)
	data := b[4+8*n:]
	var out []string
	for i := uint32(0); i < n; i++ {
		kl := binary.LittleEndian.Uint32(b[4+8*i:])
		vl := binary.LittleEndian.Uint32(b[8+8*i:])
		out = append(out, string(data[:kl])+"="+string(data[kl+1:kl+1+vl]))
		data = data[kl+vl+2:]
	}
	return strings.Join(out, ",")
}

// unhex decodes a "0x"-prefixed hex argument; anything else is itself.
func unhex(s string) string {
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		if b, err := hex.DecodeString(h); err == nil {
			return string(b)
		}
	}
	return s
}

func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

func run(cb string) {
	for _, st := range script[cb] {
		if st.ctx != 0 && st.ctx != curCtx {
			continue
		}
		if st.root != 0 && rootOf[curCtx] != st.root {
			continue
		}
		exec(cb, st.args)
	}
}

func exec(cb string, a []string) {
	out := func(s uint32, extra string) {
		msg := "op " + strings.Join(a, " ") + " -> " + status(s)
		if extra != "" {
			msg += " " + extra
		}
		logf(2, msg)
	}
	arg := func(i int) string {
		if i < len(a) {
			return a[i]
		}
		return ""
	}
	switch a[0] {
	case "ret":
		result = num(arg(1))
	case "log":
		logf(num(arg(1)), strings.Join(a[2:], " "))
	case "get_header":
		k, kn := ptr(arg(2))
		s := proxyGetHeaderMapValue(num(arg(1)), k, kn, &retPtr, &retSize)
		out(s, taken())
	case "add_header", "replace_header":
		k, kn := ptr(arg(2))
		v, vn := ptr(dash(arg(3)))
		f := proxyAddHeaderMapValue
		if a[0] == "replace_header" {
			f = proxyReplaceHeaderMapValue
		}
		out(f(num(arg(1)), k, kn, v, vn), "")
	case "remove_header":
		k, kn := ptr(arg(2))
		out(proxyRemoveHeaderMapValue(num(arg(1)), k, kn), "")
	case "get_pairs":
		s := proxyGetHeaderMapPairs(num(arg(1)), &retPtr, &retSize)
		n := retSize
		out(s, "n="+strconv.Itoa(int(n))+" "+unpairs(taken()))
	case "set_pairs":
		b := pairs(arg(2))
		out(proxySetHeaderMapPairs(num(arg(1)), &b[0], uint32(len(b))), "")
	case "map_size":
		s := proxyGetHeaderMapSize(num(arg(1)), &retU32)
		out(s, strconv.Itoa(int(retU32)))
	case "get_buffer":
		s := proxyGetBufferBytes(num(arg(1)), num(arg(2)), num(arg(3)), &retPtr, &retSize)
		out(s, show(taken()))
	case "set_buffer":
		d, dn := ptr(dash(arg(4)))
		out(proxySetBufferBytes(num(arg(1)), num(arg(2)), num(arg(3)), d, dn), "")
	case "continue":
		out(proxyContinueStream(num(arg(1))), "")
	case "close":
		out(proxyCloseStream(num(arg(1))), "")
	case "local_response": // details: '+' stands for a space (script fields split on spaces)
		d, dn := ptr(strings.ReplaceAll(dash(arg(2)), "+", " "))
		b, bn := ptr(dash(arg(3)))
		h := pairs(arg(4))
		out(proxySendLocalResponse(num(arg(1)), d, dn, b, bn, &h[0], uint32(len(h)), -1), "")
	case "http_call":
		u, un := ptr(arg(1))
		h := pairs(arg(3))
		b, bn := ptr(dash(arg(4)))
		s := proxyHTTPCall(u, un, &h[0], uint32(len(h)), b, bn, nil, 0, num(arg(2)), &retU32)
		vars["token"] = retU32
		out(s, "token="+strconv.Itoa(int(retU32)))
	case "get_shared":
		k, kn := ptr(arg(1))
		s := proxyGetSharedData(k, kn, &retPtr, &retSize, &retU32)
		v := taken()
		if s == 0 {
			vars["cas"] = retU32
			out(s, show(v)+" cas="+strconv.Itoa(int(retU32)))
		} else {
			out(s, "")
		}
	case "set_shared":
		k, kn := ptr(arg(1))
		v, vn := ptr(dash(arg(2)))
		out(proxySetSharedData(k, kn, v, vn, num(arg(3))), "")
	case "register_queue":
		n, nn := ptr(arg(1))
		s := proxyRegisterSharedQueue(n, nn, &retU32)
		vars["queue"] = retU32
		out(s, "queue="+strconv.Itoa(int(retU32)))
	case "resolve_queue":
		v, vn := ptr(dash(arg(1)))
		n, nn := ptr(arg(2))
		s := proxyResolveSharedQueue(v, vn, n, nn, &retU32)
		if s == 0 {
			vars["queue"] = retU32
		}
		out(s, "queue="+strconv.Itoa(int(retU32)))
	case "enqueue":
		v, vn := ptr(dash(arg(2)))
		out(proxyEnqueueSharedQueue(num(arg(1)), v, vn), "")
	case "dequeue":
		s := proxyDequeueSharedQueue(num(arg(1)), &retPtr, &retSize)
		out(s, show(taken()))
	case "tick_period":
		out(proxySetTickPeriod(num(arg(1))), "")
	case "get_property":
		p := []byte(strings.ReplaceAll(arg(1), ".", "\x00"))
		s := proxyGetProperty(&p[0], uint32(len(p)), &retPtr, &retSize)
		out(s, show(taken()))
	case "set_property":
		p := []byte(strings.ReplaceAll(arg(1), ".", "\x00"))
		v, vn := ptr(arg(2))
		out(proxySetProperty(&p[0], uint32(len(p)), v, vn), "")
	case "define_metric":
		n, nn := ptr(arg(2))
		s := proxyDefineMetric(num(arg(1)), n, nn, &retU32)
		vars["metric"] = retU32
		out(s, "id="+strconv.Itoa(int(retU32)))
	case "increment":
		n, _ := strconv.ParseInt(arg(2), 10, 64)
		out(proxyIncrementMetric(num(arg(1)), n), "")
	case "record":
		n, _ := strconv.ParseUint(arg(2), 10, 64)
		out(proxyRecordMetric(num(arg(1)), n), "")
	case "get_metric":
		s := proxyGetMetric(num(arg(1)), &retU64)
		out(s, strconv.FormatUint(retU64, 10))
	case "effective":
		out(proxySetEffectiveContext(num(arg(1))), "")
	case "done":
		out(proxyDone(), "")
	case "get_status":
		s := proxyGetStatus(&retU32, &retPtr, &retSize)
		out(s, strconv.Itoa(int(retU32))+" "+taken())
	case "foreign": // an argument "0x..." is hex (binary arguments: zlib, protobuf)
		n, nn := ptr(arg(1))
		v, vn := ptr(unhex(dash(arg(2))))
		s := proxyCallForeign(n, nn, v, vn, &retPtr, &retSize)
		out(s, show(taken()))
	case "time_ns":
		s := proxyGetCurrentTime(&retU64)
		out(s, strconv.FormatUint(retU64, 10))
	case "now":
		logf(2, "now "+strconv.FormatInt(time.Now().UnixNano(), 10))
	case "trap":
		// An out-of-bounds load: a real wasm trap, not a Go panic.
		p := (*uint32)(unsafe.Pointer(uintptr(0xfffffff0)))
		logf(2, strconv.Itoa(int(*p)))
	case "panic":
		panic("probe: scripted panic in " + cb)
	case "gc":
		runtime.GC()
		logf(2, "gc done")
	case "sleep":
		time.Sleep(time.Duration(num(arg(1))) * time.Millisecond)
		logf(2, "slept")
	case "alloc":
		garbage = make([]byte, num(arg(1)))
	case "malloc_hook":
		mallocHook = arg(1)
	default:
		logf(4, "probe: unknown op "+a[0])
	}
}

var (
	garbage    []byte
	mallocHook string
)

// callback logs the callback, runs its script and returns the scripted result.
func callback(name string, ctx uint32, def uint32, args ...uint32) uint32 {
	prev := curCtx
	curCtx = ctx
	msg := "cb " + name + " ctx=" + strconv.Itoa(int(ctx))
	for _, a := range args {
		msg += " " + strconv.Itoa(int(a))
	}
	logf(2, msg)
	result = def
	run(name)
	curCtx = prev
	return result
}

func init() {
	if s := os.Getenv("PROBE_INIT"); s != "" {
		parse(strings.ReplaceAll(s, ";", "\n"))
		run("init")
	}
}

//go:wasmexport proxy_abi_version_0_2_0
func abiVersion() {}

//go:wasmexport proxy_on_context_create
func onContextCreate(ctx, parent uint32) {
	if parent == 0 {
		rootOf[ctx] = ctx
	} else {
		rootOf[ctx] = parent
	}
	callback("context_create", ctx, 0, parent)
}

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 {
	if size > 0 && !vmParsed { // once per VM, though every plugin's root gets on_vm_start
		vmParsed = true
		proxyGetBufferBytes(6, 0, size, &retPtr, &retSize)
		parse(taken())
	}
	return callback("vm_start", root, 1, size)
}

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) uint32 {
	if size > 0 {
		proxyGetBufferBytes(7, 0, size, &retPtr, &retSize)
		parseFor(taken(), root)
	}
	return callback("configure", root, 1, size)
}

//go:wasmexport proxy_on_tick
func onTick(root uint32) { callback("tick", root, 0) }

//go:wasmexport proxy_on_queue_ready
func onQueueReady(root, token uint32) { callback("queue_ready", root, 0, token) }

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(ctx, n, eos uint32) uint32 { return callback("request_headers", ctx, 0, n, eos) }

//go:wasmexport proxy_on_request_body
func onRequestBody(ctx, size, eos uint32) uint32 { return callback("request_body", ctx, 0, size, eos) }

//go:wasmexport proxy_on_request_trailers
func onRequestTrailers(ctx, n uint32) uint32 { return callback("request_trailers", ctx, 0, n) }

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(ctx, n, eos uint32) uint32 {
	return callback("response_headers", ctx, 0, n, eos)
}

//go:wasmexport proxy_on_response_body
func onResponseBody(ctx, size, eos uint32) uint32 {
	return callback("response_body", ctx, 0, size, eos)
}

//go:wasmexport proxy_on_response_trailers
func onResponseTrailers(ctx, n uint32) uint32 { return callback("response_trailers", ctx, 0, n) }

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(root, token, nh, nb, nt uint32) {
	callback("http_call_response", root, 0, token, nh, nb, nt)
}

//go:wasmexport proxy_on_log
func onLog(ctx uint32) { callback("log", ctx, 0) }

//go:wasmexport proxy_on_done
func onDone(ctx uint32) uint32 { return callback("done", ctx, 1) }

//go:wasmexport proxy_on_delete
func onDelete(ctx uint32) { callback("delete", ctx, 0) }
