package hostsim

import (
	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/foreign"
)

// callForeign runs proxy_call_foreign_function's function n: one a test registered
// (WithForeignFunction, RegisterForeignFunction; it takes precedence), else one of Envoy's
// built-ins that hostsim models (foreign.cc: compress, uncompress, clear_route_cache,
// set_envoy_filter_state), else NotFound — cpp-host's call_foreign_function answer for a
// name nothing registered, which the built-ins hostsim does not model (foreign.NotModelled)
// give too. reply reports whether the function answers data for the guest.
func (vm *VM) callForeign(n string, args []byte) (out []byte, reply bool, st Status) {
	vm.host.mu.Lock()
	f := vm.host.cfg.foreign[n]
	vm.host.mu.Unlock()
	if f != nil {
		out, err := f(append([]byte(nil), args...))
		if err != nil {
			return nil, false, abi.StatusInternalFailure
		}
		return out, true, StatusOK
	}
	switch n {
	case foreign.Compress:
		out, st = foreign.Zlib(args)
		return out, st == StatusOK, st
	case foreign.Uncompress:
		out, st = foreign.Unzlib(args)
		return out, st == StatusOK, st
	case foreign.ClearRouteCache:
		// Context::clearRouteCache: a downstream stream's route cache; a root context or an
		// upstream filter (no downstream callbacks) clears nothing. Answers nothing, Ok.
		if fr := vm.frame; fr != nil && fr.stream != nil && fr.stream.try == nil {
			fr.stream.RouteCacheClears++
		}
		return nil, false, StatusOK
	case foreign.SetEnvoyFilterState:
		return nil, false, vm.setEnvoyFilterState(args)
	}
	return nil, false, StatusNotFound
}

// setEnvoyFilterState is set_envoy_filter_state (Context::setEnvoyFilterState), in its
// order: arguments that do not parse are BadArgument; a key no factory is registered under
// is NotFound; a value its factory refuses is BadArgument; a root context, which has no
// stream info, is NotFound; otherwise the object goes into the stream info's filter state
// under the key (the downstream stream's, for an upstream filter: UpstreamFilterManager::
// streamInfo is the router's).
func (vm *VM) setEnvoyFilterState(args []byte) Status {
	a, ok := foreign.ParseFilterStateArgs(args)
	if !ok {
		return abi.StatusBadArgument
	}
	factory, ok := foreign.FactoryFor(a.Path)
	if !ok {
		return StatusNotFound
	}
	obj, ok := factory(a.Value)
	if !ok {
		return abi.StatusBadArgument
	}
	fr := vm.frame
	if fr == nil || fr.stream == nil {
		return StatusNotFound
	}
	info := fr.stream.info()
	if info.EnvoyFilterState == nil {
		info.EnvoyFilterState = map[string][]byte{}
	}
	info.EnvoyFilterState[a.Path] = obj
	return StatusOK
}

// GetEnvoyFilterState returns the object set_envoy_filter_state stored under key on the
// stream (what it holds, e.g. the server name of envoy.network.upstream_server_name).
func (vm *VM) GetEnvoyFilterState(contextID uint32, key string) (v []byte, ok bool) {
	vm.streamView(contextID, func(s *httpStream) { v, ok = s.EnvoyFilterState[key] })
	return v, ok
}
