package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Metrics is the model's side of the metric functions.
type Metrics interface {
	DefineMetric(t abi.MetricType, name []byte) (id uint32, result abi.Status)
	IncrementMetric(id uint32, offset int64) abi.Status
	RecordMetric(id uint32, value uint64) abi.Status
	GetMetric(id uint32) (uint64, abi.Status)
}

func metrics() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "proxy_define_metric", Params: sig(4, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			name, ok := read(g, u32(s[1]), u32(s[2]))
			if !ok {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			id, result := g.DefineMetric(abi.MetricType(u32(s[0])), name)
			if result == abi.StatusOK && !writeU32(g, u32(s[3]), id) {
				result = abi.StatusInvalidMemoryAccess
			}
			st(s, result)
		}},
		{Name: "proxy_increment_metric", Params: []api.ValueType{i32, i64}, Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, g.IncrementMetric(u32(s[0]), int64(s[1])))
		}},
		{Name: "proxy_record_metric", Params: []api.ValueType{i32, i64}, Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, g.RecordMetric(u32(s[0]), s[1]))
		}},
		{Name: "proxy_get_metric", Params: sig(2, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			v, result := g.GetMetric(u32(s[0]))
			if result == abi.StatusOK && !writeU64(g, u32(s[1]), v) {
				result = abi.StatusInvalidMemoryAccess
			}
			st(s, result)
		}},
	}
}
