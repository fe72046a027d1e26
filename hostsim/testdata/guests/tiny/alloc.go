//go:build !noalloc

package main

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) *byte {
	b := make([]byte, size+1)
	pins = append(pins, b)
	return &b[0]
}
