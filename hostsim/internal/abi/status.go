package abi

import "fmt"

// Status is a proxy-wasm host status code (proxy_wasm_common.h, WasmResult).
type Status uint32

// Status codes returned by the host functions.
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusBadExpression        Status = 5
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCasMismatch          Status = 8
	StatusResultMismatch       Status = 9
	StatusInternalFailure      Status = 10
	StatusBrokenConnection     Status = 11
	StatusUnimplemented        Status = 12
)

var statusNames = [...]string{"Ok", "NotFound", "BadArgument", "SerializationFailure", "ParseFailure",
	"BadExpression", "InvalidMemoryAccess", "Empty", "CasMismatch", "ResultMismatch", "InternalFailure",
	"BrokenConnection", "Unimplemented"}

// String names the status as the spec does.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint32(s))
}
