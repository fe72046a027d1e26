package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Logger is the model's side of proxy_log and proxy_get_log_level.
type Logger interface {
	// Log writes a guest log line.
	Log(level abi.LogLevel, msg string)
	// LogLevel is the level the host logs at.
	LogLevel() abi.LogLevel
}

func logging() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "proxy_log", Params: sig(3, i32), Results: status, Allow: wasm.AllowStartup | wasm.AllowMalloc, Fn: func(g Guest, _ api.Module, s []uint64) {
			level := abi.LogLevel(u32(s[0]))
			if level >= abi.LogLevels {
				st(s, abi.StatusBadArgument)
				return
			}
			msg, ok := read(g, u32(s[1]), u32(s[2]))
			if !ok {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			g.Log(level, string(msg))
			st(s, abi.StatusOK)
		}},
		// ABI 0.2.1 only.
		{Name: "proxy_get_log_level", Params: sig(1, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			writeU32(g, u32(s[0]), uint32(g.LogLevel()))
			st(s, abi.StatusOK)
		}},
	}
}
