// Command noop is a do-nothing proxy-wasm filter built exactly like spillway.wasm, the
// baseline for the per-request cost figures (make bench).
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// main is never run in a c-shared wasip1 module; the VM context is set in init.
func main() {}

func init() { proxywasm.SetVMContext(&types.DefaultVMContext{}) }
