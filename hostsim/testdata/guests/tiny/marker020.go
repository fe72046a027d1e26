//go:build !nomarker && !abi021

package main

//go:wasmexport proxy_abi_version_0_2_0
func abiVersion() {}
