package hostsim

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
	"github.com/spillwayproxy/spillway/hostsim/internal/hostfn"
)

// instantiateEnv links the proxy-wasm ABI (hostsim/internal/hostfn) as the env module.
func instantiateEnv(ctx context.Context, rt wazero.Runtime) error {
	err := hostfn.Instantiate(ctx, rt, func(module string, f wasm.Func[hostfn.Guest]) api.GoModuleFunction {
		return wrapHostFunc(module, f, func(vm *VM) hostfn.Guest { return (*guest)(vm) })
	})
	if err != nil {
		return fmt.Errorf("hostsim: %w", err)
	}
	return nil
}

// The VM as the env functions see it (hostfn.Guest): each method is the model's answer for
// one ABI area; the functions have decoded the arguments and encode the result.

func (g *guest) LogLevel() abi.LogLevel { return g.host.cfg.logLevel }

func (g *guest) GetProperty(path []byte) ([]byte, abi.Status) {
	return g.vm().getProperty(string(path))
}

func (g *guest) SetProperty(path, value []byte) abi.Status {
	return g.vm().setProperty(string(path), value)
}

func (g *guest) HeaderMap(t abi.MapType, mutable bool) (*[][2]string, abi.Status) {
	return g.vm().headerMap(t, mutable)
}

func (g *guest) Scratch() *[]byte { return &g.scratch }

func (g *guest) Buffer(t abi.BufferType) (b *[]byte, mutable, ok bool) { return g.vm().bufferRW(t) }

func (g *guest) PluginConfiguration() []byte { return g.host.cfg.pluginConfig }

func (g *guest) ContinueStream(t abi.StreamType) abi.Status { return g.vm().continueStream(t) }

func (g *guest) CloseStream(t abi.StreamType) abi.Status { return g.vm().closeStream(t) }

func (g *guest) SendLocalResponse(code uint32, details string, body []byte, headers [][2]string, grpcStatus int32) {
	g.vm().sendLocalResponse(&LocalResponse{StatusCode: code, StatusCodeDetail: details,
		Data: append([]byte(nil), body...), Headers: headers, GRPCStatus: grpcStatus})
}

func (g *guest) SetEffectiveContext(id uint32) abi.Status { return g.vm().setEffectiveContext(id) }

func (g *guest) GetSharedData(key []byte) ([]byte, uint32, bool) {
	return g.host.proc.state.Get(g.host.cfg.vmID, string(key))
}

func (g *guest) SetSharedData(key, value []byte, cas uint32) abi.Status {
	return g.host.proc.state.Set(g.host.cfg.vmID, string(key), value, cas)
}

func (g *guest) RegisterQueue(name []byte) uint32 {
	return g.host.proc.registerQueue(g.host.cfg.vmID, string(name), g.vm())
}

// ResolveQueue looks in the caller's own vm_id when vmID is empty.
func (g *guest) ResolveQueue(vmID, name []byte) (uint32, bool) {
	id := string(vmID)
	if id == "" {
		id = g.host.cfg.vmID
	}
	return g.host.proc.resolveQueue(id, string(name))
}

// Enqueue notifies the queue's registrant asynchronously, once per enqueue.
func (g *guest) Enqueue(token uint32, value []byte) abi.Status {
	return g.host.proc.enqueue(g.host, token, value)
}

func (g *guest) Dequeue(token uint32) ([]byte, abi.Status) { return g.host.proc.state.Dequeue(token) }

func (g *guest) NewCalloutToken() uint32 { return g.host.newCalloutToken() }

func (g *guest) HTTPCall(token uint32, upstream []byte, headers, trailers [][2]string, body []byte, timeoutMs int32) abi.Status {
	return g.vm().httpCall(token, upstream, headers, trailers, body, timeoutMs)
}

func (g *guest) CalloutStatus() (abi.Status, string) { return g.status, g.statusMsg }

func (g *guest) DefineMetric(t abi.MetricType, name []byte) (uint32, abi.Status) {
	return g.host.metrics.Define(t, string(name))
}

func (g *guest) IncrementMetric(id uint32, offset int64) abi.Status {
	return g.host.metrics.Increment(id, offset)
}

func (g *guest) RecordMetric(id uint32, value uint64) abi.Status {
	return g.host.metrics.Record(id, value)
}

func (g *guest) GetMetric(id uint32) (uint64, abi.Status) { return g.host.metrics.Get(id) }

func (g *guest) SetTickPeriod(ms uint32) { g.vm().setTickPeriod(ms) }

func (g *guest) CallForeign(name, args []byte) ([]byte, bool, abi.Status) {
	return g.vm().callForeign(string(name), args)
}
