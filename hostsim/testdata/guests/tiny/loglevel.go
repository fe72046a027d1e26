//go:build abi021 || loglevel

package main

import "strconv"

//go:wasmimport env proxy_get_log_level
func proxyGetLogLevel(level *uint32) uint32

var level uint32

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 {
	st := proxyGetLogLevel(&level)
	logf("log level " + strconv.Itoa(int(level)) + " status " + strconv.Itoa(int(st)))
	return 1
}
