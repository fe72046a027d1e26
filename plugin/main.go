// Command plugin is the Spillway proxy-wasm filter's entry point. It is built with
// `make build` (plugin/wasmbuild) into build/spillway.wasm, a wasip1 reactor module that
// Envoy ≥ 1.33 loads; natively the same code runs under the SDK's proxytest.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/internal/filter"
)

// main is never called in a c-shared wasip1 module: only package init runs (from
// _initialize), so the VM context is registered there. Host calls other than logging are
// not allowed during _initialize, and proxywasm.SetVMContext makes none.
func main() {}

func init() { proxywasm.SetVMContext(filter.NewVMContext()) }
