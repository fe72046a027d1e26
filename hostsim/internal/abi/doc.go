// Package abi is the proxy-wasm ABI as a host sees it, below any model of Envoy: status
// codes and enums (proxy_wasm_common.h), the map serialization, guest memory access and the
// shape of a host function.
package abi
