// Package abi is the proxy-wasm ABI's vocabulary as a host sees it, below any model of
// Envoy and apart from any VM: status codes and enums (proxy_wasm_common.h), the map
// serialization and the header-list helpers. Guest memory access and the shape of a host
// function, which need wazero, are hostsim/internal/abi/wasm.
package abi
