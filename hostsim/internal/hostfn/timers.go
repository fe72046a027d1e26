package hostfn

import (
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Timers is the model's side of ticks and the host's time.
type Timers interface {
	// SetTickPeriod sets the calling root's tick period (0 stops its ticks).
	SetTickPeriod(ms uint32)
	// Now is the host's time.
	Now() time.Time
}

func timers() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "proxy_set_tick_period_milliseconds", Params: sig(1, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			g.SetTickPeriod(u32(s[0]))
			st(s, abi.StatusOK)
		}},
		{Name: "proxy_get_current_time_nanoseconds", Params: sig(1, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			if !writeU64(g, u32(s[0]), uint64(g.Now().UnixNano())) {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			st(s, abi.StatusOK)
		}},
	}
}
