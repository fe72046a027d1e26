// Command wasiextra imports a WASI function (fd_pread) that Envoy 1.33 does not provide,
// so it must fail to load there and load on cpp-host head (#533 stubs).
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o wasiextra.wasm .
package main

import "unsafe"

func main() {}

//go:wasmimport wasi_snapshot_preview1 fd_pread
func fdPread(fd int32, iovs unsafe.Pointer, n int32, off int64, nread unsafe.Pointer) int32

var pins [][]byte

//go:wasmexport proxy_abi_version_0_2_0
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) *byte {
	b := make([]byte, size+1)
	pins = append(pins, b)
	return &b[0]
}

var errno int32

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 {
	var n uint32
	errno = fdPread(3, nil, 0, 0, unsafe.Pointer(&n))
	return 1
}
