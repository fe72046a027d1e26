//go:build abi021

package main

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}
