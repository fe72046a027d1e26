package hostfn

import (
	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// envCommon are the env imports cpp-host links for every ABI version
// (include/proxy-wasm/exports.h FOR_ALL_HOST_FUNCTIONS, plus Envoy's own and the stubs).
var envCommon = wasm.NameSet("proxy_log", "proxy_get_status", "proxy_set_property", "proxy_get_property",
	"proxy_send_local_response", "proxy_get_shared_data", "proxy_set_shared_data", "proxy_register_shared_queue",
	"proxy_resolve_shared_queue", "proxy_dequeue_shared_queue", "proxy_enqueue_shared_queue",
	"proxy_get_header_map_value", "proxy_add_header_map_value", "proxy_replace_header_map_value",
	"proxy_remove_header_map_value", "proxy_get_header_map_pairs", "proxy_set_header_map_pairs",
	"proxy_get_header_map_size", "proxy_get_buffer_status", "proxy_get_buffer_bytes", "proxy_set_buffer_bytes",
	"proxy_http_call", "proxy_grpc_call", "proxy_grpc_stream", "proxy_grpc_close", "proxy_grpc_cancel",
	"proxy_grpc_send", "proxy_set_tick_period_milliseconds", "proxy_get_current_time_nanoseconds",
	"proxy_define_metric", "proxy_increment_metric", "proxy_record_metric", "proxy_get_metric",
	"proxy_set_effective_context", "proxy_done", "proxy_call_foreign_function",
	"pthread_equal", "emscripten_notify_memory_growth", "envoy_resolve_dns")

// envByABI are the imports that depend on the module's ABI marker ([host] src/wasm.cc).
var envByABI = map[abi.ABIVersion]map[string]bool{
	abi.ABI010: wasm.NameSet("proxy_get_configuration", "proxy_continue_request", "proxy_continue_response", "proxy_clear_route_cache"),
	abi.ABI020: wasm.NameSet("proxy_continue_stream", "proxy_close_stream"),
	abi.ABI021: wasm.NameSet("proxy_continue_stream", "proxy_close_stream", "proxy_get_log_level"),
}

// ImportAllowed reports whether cpp-host resolves the env import name for a module of ABI
// version v. Funcs links the union; a Host checks a module's imports against its ABI.
func ImportAllowed(name string, v abi.ABIVersion) bool {
	return envCommon[name] || envByABI[v][name]
}
