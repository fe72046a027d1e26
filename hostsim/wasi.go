package hostsim

import (
	"context"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// WASIMode chooses the WASI surface the guest sees.
type WASIMode int

// WASI modes. The zero value is Envoy 1.33's, the default.
const (
	// WASIEnvoy133 is proxy-wasm-cpp-host as shipped in Envoy 1.33–1.36 (c4d7bb0): only the
	// functions it registers exist (any other import fails instantiation), poll_oneoff and
	// fd_fdstat_set_flags answer ENOSYS (52), fd_write goes to the log.
	WASIEnvoy133 WASIMode = iota
	// WASIEnvoy132 is cpp-host before #427 (Envoy ≤ 1.32): no poll_oneoff, sched_yield or
	// fd_fdstat_set_flags, so a Go module fails to load.
	WASIEnvoy132
	// WASICppHostHead is cpp-host after #533 (94091cd): about 28 more stubs, and
	// poll_oneoff succeeds at once with no events. With a virtual clock a blocking poll
	// moves the clock by its timeout, as the busy-waiting guest would see time pass.
	WASICppHostHead
	// WASIWazero is wazero's complete wasi_snapshot_preview1 (what the SDK's proxytest
	// runs), with the clocks and sleeps wired to the host's clock.
	WASIWazero
)

// String names the mode.
func (m WASIMode) String() string {
	switch m {
	case WASIEnvoy133:
		return "envoy-1.33"
	case WASIEnvoy132:
		return "envoy-1.32"
	case WASICppHostHead:
		return "cpp-host-head"
	case WASIWazero:
		return "wazero"
	}
	return fmt.Sprintf("WASIMode(%d)", int(m))
}

func (m WASIMode) engine() engineKind {
	if m == WASIWazero {
		return engineWazero
	}
	return engineEnvoy
}

func nameSet(names ...string) map[string]bool {
	s := make(map[string]bool, len(names))
	for _, n := range names {
		s[n] = true
	}
	return s
}

// cpp-host's FOR_ALL_WASI_FUNCTIONS before #427, and what #427 and #533 added.
var (
	wasiEnvoy132 = []string{"fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get", "environ_get",
		"environ_sizes_get", "args_get", "args_sizes_get", "clock_time_get", "random_get", "proc_exit",
		"path_open", "fd_prestat_get", "fd_prestat_dir_name"}
	wasiAdded133  = []string{"fd_fdstat_set_flags", "sched_yield", "poll_oneoff"}
	wasiAddedHead = []string{"fd_fdstat_set_rights", "clock_res_get", "fd_advise", "fd_allocate",
		"fd_datasync", "fd_filestat_set_size", "fd_filestat_set_times", "fd_pread", "fd_pwrite", "fd_readdir",
		"fd_renumber", "fd_sync", "fd_tell", "path_create_directory", "path_filestat_set_times", "path_link",
		"path_readlink", "path_remove_directory", "path_rename", "path_symlink", "path_unlink_file",
		"sock_accept", "sock_recv", "sock_send", "sock_shutdown", "path_filestat_get", "fd_filestat_get"}

	wasiSet132  = nameSet(wasiEnvoy132...)
	wasiSet133  = nameSet(append(append([]string{}, wasiEnvoy132...), wasiAdded133...)...)
	wasiSetHead = nameSet(append(append(append([]string{}, wasiEnvoy132...), wasiAdded133...), wasiAddedHead...)...)
)

// WASIFunctions lists the wasi_snapshot_preview1 functions the mode provides (nil for
// WASIWazero, which provides all of them).
func (m WASIMode) WASIFunctions() []string {
	var s map[string]bool
	switch m {
	case WASIEnvoy133:
		s = wasiSet133
	case WASIEnvoy132:
		s = wasiSet132
	case WASICppHostHead:
		s = wasiSetHead
	default:
		return nil
	}
	out := make([]string, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	return sortedStrings(out)
}

func (m WASIMode) provides(name string) bool {
	switch m {
	case WASIEnvoy133:
		return wasiSet133[name]
	case WASIEnvoy132:
		return wasiSet132[name]
	case WASICppHostHead:
		return wasiSetHead[name]
	}
	return true
}

// WASI errno values.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoInval   = 28
	errnoNoent   = 44
	errnoNosys   = 52
	errnoNotsup  = 58
)

// hostFunc is one host function: its signature, when it may run, and its implementation.
type hostFunc struct {
	name    string
	params  []api.ValueType
	results []api.ValueType
	allow   restrictMask
	fn      func(vm *VM, m api.Module, s []uint64)
}

// restrictMask says in which restricted phases a host function may run.
type restrictMask uint8

const (
	allowStartup     restrictMask = 1 << iota // during _initialize / main (cpp-host startVm allow-list)
	allowMalloc                               // during host-initiated proxy_on_memory_allocate
	allowStartupHead                          // during start-up, post-#533 hosts only
	allowMallocHead                           // during malloc, post-#533 hosts only
)

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

func sig(n int, t api.ValueType) []api.ValueType {
	s := make([]api.ValueType, n)
	for i := range s {
		s[i] = t
	}
	return s
}

// envoyWASIFuncs is hostsim's wasi_snapshot_preview1 / wasi_unstable, after cpp-host's
// src/exports.cc. The union of all Envoy modes is linked; each Host checks the module's
// imports against its own mode before instantiating.
func envoyWASIFuncs() []hostFunc {
	ret := func(s []uint64, errno uint32) { s[0] = uint64(errno) }
	nosys := func(vm *VM, m api.Module, s []uint64) { ret(s, errnoNosys) }
	fs := []hostFunc{
		{name: "fd_write", params: sig(4, i32), results: sig(1, i32), allow: allowStartup | allowMalloc,
			fn: func(vm *VM, m api.Module, s []uint64) {
				ret(s, vm.wasiFdWrite(m, uint32(s[0]), uint32(s[1]), uint32(s[2]), uint32(s[3])))
			}},
		{name: "fd_read", params: sig(4, i32), results: sig(1, i32), fn: nosys},
		{name: "fd_seek", params: []api.ValueType{i32, i64, i32, i32}, results: sig(1, i32),
			fn: func(vm *VM, m api.Module, s []uint64) {
				vm.host.log(vm, LogError, "wasi_unstable fd_seek")
				ret(s, errnoSuccess)
			}},
		{name: "fd_close", params: sig(1, i32), results: sig(1, i32),
			fn: func(vm *VM, m api.Module, s []uint64) {
				vm.host.log(vm, LogError, "wasi_unstable fd_close")
				ret(s, errnoSuccess)
			}},
		{name: "fd_fdstat_get", params: sig(2, i32), results: sig(1, i32), allow: allowStartup,
			fn: func(vm *VM, m api.Module, s []uint64) {
				fd, out := uint32(s[0]), uint32(s[1])
				if fd != 1 && fd != 2 {
					ret(s, errnoBadf)
					return
				}
				var st [24]byte
				st[0] = 2  // filetype: character device
				st[8] = 64 // rights base: FD_WRITE
				if !m.Memory().Write(out, st[:]) {
					ret(s, errnoFault)
					return
				}
				ret(s, errnoSuccess)
			}},
		{name: "fd_fdstat_set_flags", params: sig(2, i32), results: sig(1, i32), allow: allowStartup, fn: nosys},
		{name: "environ_sizes_get", params: sig(2, i32), results: sig(1, i32), allow: allowStartup,
			fn: func(vm *VM, m api.Module, s []uint64) {
				n := 0
				for _, e := range vm.host.cfg.env {
					n += len(e) + 1
				}
				m.Memory().WriteUint32Le(uint32(s[0]), uint32(len(vm.host.cfg.env)))
				m.Memory().WriteUint32Le(uint32(s[1]), uint32(n))
				ret(s, errnoSuccess)
			}},
		{name: "environ_get", params: sig(2, i32), results: sig(1, i32), allow: allowStartup,
			fn: func(vm *VM, m api.Module, s []uint64) {
				arr, buf := uint32(s[0]), uint32(s[1])
				for _, e := range vm.host.cfg.env {
					if !m.Memory().WriteUint32Le(arr, buf) || !m.Memory().WriteString(buf, e) || !m.Memory().WriteByte(buf+uint32(len(e)), 0) {
						ret(s, errnoFault)
						return
					}
					arr += 4
					buf += uint32(len(e) + 1)
				}
				ret(s, errnoSuccess)
			}},
		{name: "args_sizes_get", params: sig(2, i32), results: sig(1, i32), allow: allowStartup,
			fn: func(vm *VM, m api.Module, s []uint64) {
				m.Memory().WriteUint32Le(uint32(s[0]), 0)
				m.Memory().WriteUint32Le(uint32(s[1]), 0)
				ret(s, errnoSuccess)
			}},
		{name: "args_get", params: sig(2, i32), results: sig(1, i32), allow: allowStartup,
			fn: func(vm *VM, m api.Module, s []uint64) { ret(s, errnoSuccess) }},
		{name: "clock_time_get", params: []api.ValueType{i32, i64, i32}, results: sig(1, i32), allow: allowStartup | allowMalloc,
			fn: func(vm *VM, m api.Module, s []uint64) {
				var v uint64
				switch uint32(s[0]) {
				case 0:
					v = uint64(vm.host.clock.Now().UnixNano())
				case 1:
					v = vm.host.monotonic()
				default:
					ret(s, errnoNotsup)
					return
				}
				if !m.Memory().WriteUint64Le(uint32(s[2]), v) {
					ret(s, errnoFault)
					return
				}
				ret(s, errnoSuccess)
			}},
		{name: "random_get", params: sig(2, i32), results: sig(1, i32), allow: allowStartup,
			fn: func(vm *VM, m api.Module, s []uint64) {
				p, n := uint32(s[0]), uint32(s[1])
				if n > 64<<10 {
					ret(s, errnoInval)
					return
				}
				buf, ok := m.Memory().Read(p, n)
				if !ok {
					ret(s, errnoFault)
					return
				}
				vm.host.random(buf)
				ret(s, errnoSuccess)
			}},
		{name: "proc_exit", params: sig(1, i32),
			fn: func(vm *VM, m api.Module, s []uint64) {
				// cpp-host logs and returns; the Go runtime then traps on its own.
				vm.host.log(vm, LogError, fmt.Sprintf("wasi_unstable proc_exit(%d)", uint32(s[0])))
				vm.exitCode = int32(uint32(s[0]))
				vm.exited = true
			}},
		{name: "path_open", params: []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i32, i32}, results: sig(1, i32),
			fn: func(vm *VM, m api.Module, s []uint64) { ret(s, errnoNoent) }},
		{name: "fd_prestat_get", params: sig(2, i32), results: sig(1, i32), allow: allowStartup,
			fn: func(vm *VM, m api.Module, s []uint64) { ret(s, errnoBadf) }},
		{name: "fd_prestat_dir_name", params: sig(3, i32), results: sig(1, i32), allow: allowStartup, fn: nosys},
		{name: "sched_yield", results: sig(1, i32), fn: func(vm *VM, m api.Module, s []uint64) { ret(s, errnoSuccess) }},
		{name: "poll_oneoff", params: sig(4, i32), results: sig(1, i32), allow: allowStartupHead | allowMallocHead,
			fn: func(vm *VM, m api.Module, s []uint64) {
				ret(s, vm.wasiPollOneoff(m, uint32(s[0]), uint32(s[2]), uint32(s[3])))
			}},
		{name: "clock_res_get", params: sig(2, i32), results: sig(1, i32), allow: allowStartupHead,
			fn: func(vm *VM, m api.Module, s []uint64) {
				if id := uint32(s[0]); id > 1 {
					ret(s, errnoNotsup)
					return
				}
				m.Memory().WriteUint64Le(uint32(s[1]), 1)
				ret(s, errnoSuccess)
			}},
	}
	// The #533 stubs with their WASI signatures; they all answer ENOSYS (no file system).
	stubs := map[string][]api.ValueType{
		"fd_fdstat_set_rights": {i32, i64, i64}, "fd_advise": {i32, i64, i64, i32}, "fd_allocate": {i32, i64, i64},
		"fd_datasync": {i32}, "fd_filestat_set_size": {i32, i64}, "fd_filestat_set_times": {i32, i64, i64, i32},
		"fd_pread": {i32, i32, i32, i64, i32}, "fd_pwrite": {i32, i32, i32, i64, i32},
		"fd_readdir": {i32, i32, i32, i64, i32}, "fd_renumber": {i32, i32}, "fd_sync": {i32}, "fd_tell": {i32, i32},
		"path_create_directory": {i32, i32, i32}, "path_filestat_set_times": {i32, i32, i32, i32, i64, i64, i32},
		"path_link": {i32, i32, i32, i32, i32, i32, i32}, "path_readlink": {i32, i32, i32, i32, i32, i32},
		"path_remove_directory": {i32, i32, i32}, "path_rename": {i32, i32, i32, i32, i32, i32},
		"path_symlink": {i32, i32, i32, i32, i32}, "path_unlink_file": {i32, i32, i32},
		"sock_accept": {i32, i32, i32}, "sock_recv": {i32, i32, i32, i32, i32, i32},
		"sock_send": {i32, i32, i32, i32, i32}, "sock_shutdown": {i32, i32},
		"path_filestat_get": {i32, i32, i32, i32, i32}, "fd_filestat_get": {i32, i32},
	}
	for _, name := range wasiAddedHead {
		if p, ok := stubs[name]; ok {
			fs = append(fs, hostFunc{name: name, params: p, results: sig(1, i32), allow: allowStartupHead, fn: nosys})
		}
	}
	return fs
}

// instantiateEnvoyWASI links hostsim's WASI as wasi_snapshot_preview1 and wasi_unstable.
func instantiateEnvoyWASI(ctx context.Context, rt wazero.Runtime) error {
	for _, modName := range []string{wasi_snapshot_preview1.ModuleName, "wasi_unstable"} {
		b := rt.NewHostModuleBuilder(modName)
		for _, f := range envoyWASIFuncs() {
			b.NewFunctionBuilder().WithGoModuleFunction(wrapHostFunc(modName, f), f.params, f.results).Export(f.name)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return err
		}
	}
	return nil
}

// wasiFdWrite sends stdout to the info log and stderr to the error log, as cpp-host does.
func (vm *VM) wasiFdWrite(m api.Module, fd, iovs, iovsLen, nwrittenPtr uint32) uint32 {
	if fd != 1 && fd != 2 {
		return errnoBadf
	}
	mem := m.Memory()
	var out []byte
	for i := uint32(0); i < iovsLen; i++ {
		p, ok1 := mem.ReadUint32Le(iovs + i*8)
		n, ok2 := mem.ReadUint32Le(iovs + i*8 + 4)
		buf, ok3 := mem.Read(p, n)
		if !ok1 || !ok2 || !ok3 {
			return errnoFault
		}
		out = append(out, buf...)
	}
	if !mem.WriteUint32Le(nwrittenPtr, uint32(len(out))) {
		return errnoFault
	}
	level := LogInfo
	if fd == 2 {
		level = LogError
	}
	vm.host.stdio(vm, fd, out, level)
	return errnoSuccess
}

// wasiPollOneoff answers ENOSYS (Envoy ≤ 1.36) or, post-#533, no events at once.
func (vm *VM) wasiPollOneoff(m api.Module, in, out uint32, neventsPtr uint32) uint32 {
	_ = out
	if vm.host.cfg.wasi != WASICppHostHead {
		return errnoNosys
	}
	// A blocking clock subscription (type 0, relative timeout): the guest will busy-wait on
	// the clock; let virtual time pass by that timeout so it can make progress.
	if vc, ok := vm.host.clock.(SettableClock); ok && !vm.host.realtime {
		if tag, ok := m.Memory().ReadByte(in + 8); ok && tag == 0 {
			if timeout, ok := m.Memory().ReadUint64Le(in + 24); ok && timeout > 0 {
				flags, _ := m.Memory().ReadUint16Le(in + 40)
				if flags&1 == 0 { // relative
					vc.Set(vc.Now().Add(time.Duration(timeout)))
				}
			}
		}
	}
	if !m.Memory().WriteUint32Le(neventsPtr, 0) {
		return errnoFault
	}
	return errnoSuccess
}
