// Package wasi is the WASI surface Envoy's proxy-wasm-cpp-host gives a module, by Envoy
// version (Mode): which functions exist and what each answers (cpp-host src/exports.cc),
// over a Guest the host's model implements.
package wasi

import (
	"fmt"
	"sort"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Mode chooses the WASI surface the guest sees.
type Mode int

// WASI modes. The zero value is Envoy 1.33's, the default.
const (
	// Envoy133 is proxy-wasm-cpp-host from c4d7bb0 (Envoy 1.33) until #533 (first pinned
	// by Envoy 1.40): only the functions it registers exist (any other import fails
	// instantiation), poll_oneoff and fd_fdstat_set_flags answer ENOSYS (52), fd_write goes
	// to the log.
	Envoy133 Mode = iota
	// Envoy132 is cpp-host before #427 (Envoy ≤ 1.32): no poll_oneoff, sched_yield or
	// fd_fdstat_set_flags, so a Go module fails to load.
	Envoy132
	// CppHostHead is cpp-host after #533 (94091cd): about 28 more stubs, and poll_oneoff
	// succeeds at once with no events. With a virtual clock a blocking poll moves the clock
	// by its timeout, as the busy-waiting guest would see time pass.
	CppHostHead
	// Wazero is wazero's complete wasi_snapshot_preview1 (what the SDK's proxytest runs),
	// with the clocks and sleeps wired to the host's clock.
	Wazero
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Envoy133:
		return "envoy-1.33"
	case Envoy132:
		return "envoy-1.32"
	case CppHostHead:
		return "cpp-host-head"
	case Wazero:
		return "wazero"
	}
	return fmt.Sprintf("WASIMode(%d)", int(m))
}

// cpp-host's FOR_ALL_WASI_FUNCTIONS before #427, and what #427 and #533 added.
var (
	envoy132 = []string{"fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get", "environ_get",
		"environ_sizes_get", "args_get", "args_sizes_get", "clock_time_get", "random_get", "proc_exit",
		"path_open", "fd_prestat_get", "fd_prestat_dir_name"}
	added133  = []string{"fd_fdstat_set_flags", "sched_yield", "poll_oneoff"}
	addedHead = []string{"fd_fdstat_set_rights", "clock_res_get", "fd_advise", "fd_allocate",
		"fd_datasync", "fd_filestat_set_size", "fd_filestat_set_times", "fd_pread", "fd_pwrite", "fd_readdir",
		"fd_renumber", "fd_sync", "fd_tell", "path_create_directory", "path_filestat_set_times", "path_link",
		"path_readlink", "path_remove_directory", "path_rename", "path_symlink", "path_unlink_file",
		"sock_accept", "sock_recv", "sock_send", "sock_shutdown", "path_filestat_get", "fd_filestat_get"}

	set132  = wasm.NameSet(envoy132...)
	set133  = wasm.NameSet(append(append([]string{}, envoy132...), added133...)...)
	setHead = wasm.NameSet(append(append(append([]string{}, envoy132...), added133...), addedHead...)...)
)

// WASIFunctions lists the wasi_snapshot_preview1 functions the mode provides (nil for
// Wazero, which provides all of them).
func (m Mode) WASIFunctions() []string {
	var s map[string]bool
	switch m {
	case Envoy133:
		s = set133
	case Envoy132:
		s = set132
	case CppHostHead:
		s = setHead
	default:
		return nil
	}
	out := make([]string, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Provides reports whether the mode has the WASI function name.
func (m Mode) Provides(name string) bool {
	switch m {
	case Envoy133:
		return set133[name]
	case Envoy132:
		return set132[name]
	case CppHostHead:
		return setHead[name]
	}
	return true
}
