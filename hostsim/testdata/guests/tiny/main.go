// Command tiny is a minimal raw guest whose exports are chosen by build tags, for the load
// checks: "nomarker" drops the ABI marker, "noalloc" drops the allocator, "abi021" declares
// ABI 0.2.1 (and uses proxy_get_log_level), "loglevel" imports proxy_get_log_level under
// ABI 0.2.0 (which Envoy does not link).
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared [-tags T] -o tiny.wasm .
package main

func main() {}

var pins [][]byte

//go:wasmexport proxy_on_context_create
func onContextCreate(ctx, parent uint32) {}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(ctx, n, eos uint32) uint32 { return 0 }

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg *byte, size uint32) uint32

func logf(msg string) {
	b := []byte(msg)
	proxyLog(2, &b[0], uint32(len(b)))
}
