package hostsim

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

func instantiateEnv(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder("env")
	for _, f := range envFuncs() {
		b.NewFunctionBuilder().WithGoModuleFunction(wrapHostFunc("env", f, func(vm *VM) *VM { return vm }), f.Params, f.Results).Export(f.Name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("hostsim: env: %w", err)
	}
	return nil
}

func u32(v uint64) uint32 { return uint32(v) }

func st(s []uint64, v Status) { s[0] = uint64(v) }

// envFuncs is the proxy-wasm ABI 0.1.0/0.2.x host side, after cpp-host src/exports.cc and
// Envoy's context.cc.
func envFuncs() []abi.Func[*VM] {
	r := abi.Sig(1, abi.I32)
	return []abi.Func[*VM]{
		{Name: "proxy_log", Params: abi.Sig(3, abi.I32), Results: r, Allow: abi.AllowStartup | abi.AllowMalloc, Fn: func(vm *VM, _ api.Module, s []uint64) {
			level := LogLevel(u32(s[0]))
			if level >= abi.LogLevels {
				st(s, StatusBadArgument)
				return
			}
			msg, ok := vm.read(u32(s[1]), u32(s[2]))
			if !ok {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			vm.host.log(vm, level, string(msg))
			st(s, StatusOK)
		}},
		{Name: "proxy_get_log_level", Params: abi.Sig(1, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			vm.mem.WriteUint32Le(u32(s[0]), uint32(vm.host.cfg.logLevel))
			st(s, StatusOK)
		}},
		{Name: "proxy_get_status", Params: abi.Sig(3, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			if !vm.mem.WriteUint32Le(u32(s[0]), uint32(vm.status)) {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			st(s, vm.copyOut([]byte(vm.statusMsg), u32(s[1]), u32(s[2])))
		}},
		{Name: "proxy_set_property", Params: abi.Sig(4, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.setProperty(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3])))
		}},
		{Name: "proxy_get_property", Params: abi.Sig(4, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			path, ok := vm.read(u32(s[0]), u32(s[1]))
			if !ok {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			v, status := vm.getProperty(string(path))
			if status != StatusOK {
				st(s, status)
				return
			}
			st(s, vm.copyOut(v, u32(s[2]), u32(s[3])))
		}},
		{Name: "proxy_send_local_response", Params: abi.Sig(8, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.sendLocalResponse(s))
		}},
		{Name: "proxy_get_shared_data", Params: abi.Sig(5, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			key, ok := vm.read(u32(s[0]), u32(s[1]))
			if !ok {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			v, cas, found := vm.host.proc.get(vm.host.cfg.vmID, string(key))
			if !found {
				st(s, StatusNotFound)
				return
			}
			if status := vm.copyOut(v, u32(s[2]), u32(s[3])); status != StatusOK {
				st(s, status)
				return
			}
			if !vm.mem.WriteUint32Le(u32(s[4]), cas) {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			st(s, StatusOK)
		}},
		{Name: "proxy_set_shared_data", Params: abi.Sig(5, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			key, ok1 := vm.read(u32(s[0]), u32(s[1]))
			val, ok2 := vm.read(u32(s[2]), u32(s[3]))
			if !ok1 || !ok2 {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			st(s, vm.host.proc.set(vm.host.cfg.vmID, string(key), val, u32(s[4])))
		}},
		{Name: "proxy_register_shared_queue", Params: abi.Sig(3, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			name, ok := vm.read(u32(s[0]), u32(s[1]))
			if !ok {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			token := vm.host.proc.register(vm.host.cfg.vmID, string(name), vm, vm.rootID)
			if !vm.mem.WriteUint32Le(u32(s[2]), token) {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			st(s, StatusOK)
		}},
		{Name: "proxy_resolve_shared_queue", Params: abi.Sig(5, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			vmID, ok1 := vm.read(u32(s[0]), u32(s[1]))
			name, ok2 := vm.read(u32(s[2]), u32(s[3]))
			if !ok1 || !ok2 {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			id := string(vmID)
			if id == "" {
				id = vm.host.cfg.vmID
			}
			token, found := vm.host.proc.resolve(id, string(name))
			if !found {
				st(s, StatusNotFound)
				return
			}
			if !vm.mem.WriteUint32Le(u32(s[4]), token) {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			st(s, StatusOK)
		}},
		{Name: "proxy_enqueue_shared_queue", Params: abi.Sig(3, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			val, ok := vm.read(u32(s[1]), u32(s[2]))
			if !ok {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			target, gen, root, status := vm.host.proc.enqueue(u32(s[0]), val)
			if status == StatusOK && target != nil {
				vm.host.post(event{kind: evQueueReady, vm: target, gen: gen, root: root, token: u32(s[0])})
			}
			st(s, status)
		}},
		{Name: "proxy_dequeue_shared_queue", Params: abi.Sig(3, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			v, status := vm.host.proc.dequeue(u32(s[0]))
			if status != StatusOK {
				st(s, status)
				return
			}
			st(s, vm.copyOut(v, u32(s[1]), u32(s[2])))
		}},
		{Name: "proxy_get_header_map_value", Params: abi.Sig(5, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.getHeaderMapValue(abi.MapType(u32(s[0])), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		{Name: "proxy_add_header_map_value", Params: abi.Sig(5, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.mutateHeaderMap(mapAdd, abi.MapType(u32(s[0])), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		{Name: "proxy_replace_header_map_value", Params: abi.Sig(5, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.mutateHeaderMap(mapReplace, abi.MapType(u32(s[0])), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		{Name: "proxy_remove_header_map_value", Params: abi.Sig(3, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.mutateHeaderMap(mapRemove, abi.MapType(u32(s[0])), u32(s[1]), u32(s[2]), 0, 0))
		}},
		{Name: "proxy_get_header_map_pairs", Params: abi.Sig(3, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.getHeaderMapPairs(abi.MapType(u32(s[0])), u32(s[1]), u32(s[2])))
		}},
		{Name: "proxy_set_header_map_pairs", Params: abi.Sig(3, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.setHeaderMapPairs(abi.MapType(u32(s[0])), u32(s[1]), u32(s[2])))
		}},
		{Name: "proxy_get_header_map_size", Params: abi.Sig(2, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			m, status := vm.headerMap(abi.MapType(u32(s[0])), false)
			if status != StatusOK {
				st(s, status)
				return
			}
			if !vm.mem.WriteUint32Le(u32(s[1]), uint32(abi.PairsByteSize(*m))) {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			st(s, StatusOK)
		}},
		{Name: "proxy_get_buffer_status", Params: abi.Sig(3, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			if u32(s[0]) > uint32(abi.BufferCallData) {
				st(s, StatusBadArgument)
				return
			}
			b, ok := vm.buffer(abi.BufferType(u32(s[0])))
			if !ok {
				st(s, StatusNotFound)
				return
			}
			vm.mem.WriteUint32Le(u32(s[1]), uint32(len(*b)))
			vm.mem.WriteUint32Le(u32(s[2]), 0)
			st(s, StatusOK)
		}},
		{Name: "proxy_get_buffer_bytes", Params: abi.Sig(5, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.getBufferBytes(abi.BufferType(u32(s[0])), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		{Name: "proxy_set_buffer_bytes", Params: abi.Sig(5, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.setBufferBytes(abi.BufferType(u32(s[0])), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4])))
		}},
		{Name: "proxy_continue_stream", Params: abi.Sig(1, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.continueStream(abi.StreamType(u32(s[0]))))
		}},
		{Name: "proxy_close_stream", Params: abi.Sig(1, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.closeStream(abi.StreamType(u32(s[0]))))
		}},
		{Name: "proxy_continue_request", Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) { st(s, vm.continueStream(abi.StreamRequest)) }},
		{Name: "proxy_continue_response", Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) { st(s, vm.continueStream(abi.StreamResponse)) }},
		{Name: "proxy_clear_route_cache", Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) { st(s, StatusOK) }},
		{Name: "proxy_get_configuration", Params: abi.Sig(2, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.copyOut(vm.host.cfg.pluginConfig, u32(s[0]), u32(s[1])))
		}},
		{Name: "proxy_http_call", Params: abi.Sig(10, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.httpCall(s))
		}},
		{Name: "proxy_grpc_call", Params: abi.Sig(12, abi.I32), Results: r, Fn: unimplemented},
		{Name: "proxy_grpc_stream", Params: abi.Sig(9, abi.I32), Results: r, Fn: unimplemented},
		{Name: "proxy_grpc_close", Params: abi.Sig(1, abi.I32), Results: r, Fn: unimplemented},
		{Name: "proxy_grpc_cancel", Params: abi.Sig(1, abi.I32), Results: r, Fn: unimplemented},
		{Name: "proxy_grpc_send", Params: abi.Sig(4, abi.I32), Results: r, Fn: unimplemented},
		{Name: "envoy_resolve_dns", Params: abi.Sig(3, abi.I32), Results: r, Fn: unimplemented},
		{Name: "proxy_set_tick_period_milliseconds", Params: abi.Sig(1, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			vm.setTickPeriod(u32(s[0]))
			st(s, StatusOK)
		}},
		{Name: "proxy_get_current_time_nanoseconds", Params: abi.Sig(1, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			if !vm.mem.WriteUint64Le(u32(s[0]), uint64(vm.host.clock.Now().UnixNano())) {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			st(s, StatusOK)
		}},
		{Name: "proxy_define_metric", Params: abi.Sig(4, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			name, ok := vm.read(u32(s[1]), u32(s[2]))
			if !ok {
				st(s, StatusInvalidMemoryAccess)
				return
			}
			id, status := vm.host.defineMetric(MetricType(u32(s[0])), string(name))
			if status == StatusOK && !vm.mem.WriteUint32Le(u32(s[3]), id) {
				status = StatusInvalidMemoryAccess
			}
			st(s, status)
		}},
		{Name: "proxy_increment_metric", Params: []api.ValueType{abi.I32, abi.I64}, Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.host.incrementMetric(u32(s[0]), int64(s[1])))
		}},
		{Name: "proxy_record_metric", Params: []api.ValueType{abi.I32, abi.I64}, Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.host.recordMetric(u32(s[0]), s[1]))
		}},
		{Name: "proxy_get_metric", Params: abi.Sig(2, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			v, status := vm.host.getMetric(u32(s[0]))
			if status == StatusOK && !vm.mem.WriteUint64Le(u32(s[1]), v) {
				status = StatusInvalidMemoryAccess
			}
			st(s, status)
		}},
		{Name: "proxy_set_effective_context", Params: abi.Sig(1, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.setEffectiveContext(u32(s[0])))
		}},
		{Name: "proxy_done", Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) { st(s, StatusNotFound) }},
		{Name: "proxy_call_foreign_function", Params: abi.Sig(6, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			st(s, vm.callForeign(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4]), u32(s[5])))
		}},
		{Name: "pthread_equal", Params: abi.Sig(2, abi.I32), Results: r, Fn: func(vm *VM, _ api.Module, s []uint64) {
			if u32(s[0]) == u32(s[1]) {
				s[0] = 1
			} else {
				s[0] = 0
			}
		}},
		{Name: "emscripten_notify_memory_growth", Params: abi.Sig(1, abi.I32), Allow: abi.AllowStartup, Fn: func(*VM, api.Module, []uint64) {}},
	}
}

func unimplemented(_ *VM, _ api.Module, s []uint64) { st(s, StatusUnimplemented) }

func (vm *VM) setEffectiveContext(id uint32) Status {
	fr := vm.frame
	if fr == nil {
		return StatusBadArgument
	}
	if id == vm.rootID {
		fr.effective, fr.stream = id, nil
		return StatusOK
	}
	s := vm.streams[id]
	if s == nil || !s.created || s.deleted {
		return StatusBadArgument
	}
	fr.effective, fr.stream = id, s
	return StatusOK
}

func (vm *VM) callForeign(np, nl, ap, al, rp, rs uint32) Status {
	name, ok1 := vm.read(np, nl)
	args, ok2 := vm.read(ap, al)
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	n := string(name)
	vm.host.mu.Lock()
	f := vm.host.cfg.foreign[n]
	vm.host.mu.Unlock()
	if f == nil {
		if n == "clear_route_cache" { // Envoy ≥ 1.33 registers it
			if fr := vm.frame; fr != nil && fr.stream != nil {
				fr.stream.RouteCacheClears++
			}
			return StatusOK
		}
		return StatusNotFound
	}
	out, err := f(append([]byte(nil), args...))
	if err != nil {
		return StatusInternalFailure
	}
	return vm.copyOut(out, rp, rs)
}

// getProperty resolves a property path the way Envoy ≥ 1.33 does.
func (vm *VM) getProperty(path string) ([]byte, Status) {
	h := vm.host
	var s *httpStream
	if fr := vm.frame; fr != nil {
		s = fr.stream
	}
	top, rest, _ := abi.CutPath(path)
	switch top {
	case "plugin_name":
		return []byte(h.cfg.pluginName), StatusOK
	case "plugin_root_id":
		return []byte(h.cfg.rootID), StatusOK
	case "plugin_vm_id":
		return []byte(h.cfg.vmID), StatusOK
	case "node", "cluster_name", "cluster_metadata", "route_name", "route_metadata", "listener_direction",
		"listener_metadata", "upstream_host_metadata":
		// Removed from get_property in Envoy 1.33 (use xds.*), unless set as filter state.
		if s != nil {
			if v, ok := s.filterState[path]; ok {
				return v, StatusOK
			}
		}
		return nil, StatusNotFound
	case "request", "response", "connection", "upstream", "source", "destination", "filter_state", "upstream_filter_state":
		if s == nil {
			return nil, StatusNotFound // no stream info in a root context
		}
		if v, ok := s.streamProperty(top, rest); ok {
			return v, StatusOK
		}
		if v, ok := h.property(path); ok {
			return v, StatusOK
		}
		return nil, StatusNotFound
	case "xds", "metadata":
		if v, ok := h.property(path); ok {
			return v, StatusOK
		}
		return nil, StatusNotFound
	}
	if s != nil {
		if v, ok := s.filterState[path]; ok {
			return v, StatusOK
		}
	}
	if v, ok := h.property(path); ok {
		return v, StatusOK
	}
	return nil, StatusNotFound
}

func (vm *VM) setProperty(pp, pl, vp, vl uint32) Status {
	path, ok1 := vm.read(pp, pl)
	val, ok2 := vm.read(vp, vl)
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	fr := vm.frame
	if fr == nil || fr.stream == nil {
		return StatusNotFound // no stream info
	}
	if fr.stream.filterState == nil {
		fr.stream.filterState = map[string][]byte{}
	}
	fr.stream.filterState[string(path)] = append([]byte(nil), val...)
	return StatusOK
}
