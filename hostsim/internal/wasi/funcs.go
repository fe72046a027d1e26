package wasi

import (
	"context"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// ModuleNames are the import modules the functions are linked under: cpp-host registers
// the same functions as wasi_snapshot_preview1 and wasi_unstable.
var ModuleNames = []string{wasi_snapshot_preview1.ModuleName, "wasi_unstable"}

// Guest is the calling VM as the WASI functions need it: its memory, and the host's logs,
// environment, clocks and random source.
type Guest interface {
	// Log writes a host log line attributed to the guest (cpp-host logs the stubs it
	// answers, at error).
	Log(level abi.LogLevel, msg string)
	// Stdio takes what the guest wrote to fd 1 or 2, to be logged line by line at level.
	Stdio(fd uint32, b []byte, level abi.LogLevel)
	// Env is the guest's environment, as "KEY=value".
	Env() []string
	// Now is the host's wall clock (CLOCK_REALTIME).
	Now() time.Time
	// Monotonic is the host's monotonic clock in nanoseconds.
	Monotonic() uint64
	// Random fills buf from the host's random source.
	Random(buf []byte)
	// Exit records the guest's proc_exit code.
	Exit(code int32)
	// Mode is the Host's WASI mode: every Envoy mode's functions are linked, and those that
	// differ by mode ask.
	Mode() Mode
	// PassVirtual moves a virtual clock on by d (a no-op on a real clock): what a guest
	// busy-waiting on the clock would see.
	PassVirtual(d time.Duration)
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

// Funcs is hostsim's wasi_snapshot_preview1 / wasi_unstable, after cpp-host's
// src/exports.cc. The union of all Envoy modes is linked; a Host checks the module's
// imports against its own mode (Mode.Provides) before instantiating.
func Funcs() []wasm.Func[Guest] {
	i32, i64, sig := wasm.I32, wasm.I64, wasm.Sig
	ret := func(s []uint64, errno uint32) { s[0] = uint64(errno) }
	nosys := func(_ Guest, _ api.Module, s []uint64) { ret(s, errnoNosys) }
	fs := []wasm.Func[Guest]{
		{Name: "fd_write", Params: sig(4, i32), Results: sig(1, i32), Allow: wasm.AllowStartup | wasm.AllowMalloc,
			Fn: func(g Guest, m api.Module, s []uint64) {
				ret(s, fdWrite(g, m, uint32(s[0]), uint32(s[1]), uint32(s[2]), uint32(s[3])))
			}},
		{Name: "fd_read", Params: sig(4, i32), Results: sig(1, i32), Fn: nosys},
		{Name: "fd_seek", Params: []api.ValueType{i32, i64, i32, i32}, Results: sig(1, i32),
			Fn: func(g Guest, m api.Module, s []uint64) {
				g.Log(abi.LogError, "wasi_unstable fd_seek")
				ret(s, errnoSuccess)
			}},
		{Name: "fd_close", Params: sig(1, i32), Results: sig(1, i32),
			Fn: func(g Guest, m api.Module, s []uint64) {
				g.Log(abi.LogError, "wasi_unstable fd_close")
				ret(s, errnoSuccess)
			}},
		{Name: "fd_fdstat_get", Params: sig(2, i32), Results: sig(1, i32), Allow: wasm.AllowStartup,
			Fn: func(g Guest, m api.Module, s []uint64) {
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
		{Name: "fd_fdstat_set_flags", Params: sig(2, i32), Results: sig(1, i32), Allow: wasm.AllowStartup, Fn: nosys},
		{Name: "environ_sizes_get", Params: sig(2, i32), Results: sig(1, i32), Allow: wasm.AllowStartup,
			Fn: func(g Guest, m api.Module, s []uint64) {
				env := g.Env()
				n := 0
				for _, e := range env {
					n += len(e) + 1
				}
				m.Memory().WriteUint32Le(uint32(s[0]), uint32(len(env)))
				m.Memory().WriteUint32Le(uint32(s[1]), uint32(n))
				ret(s, errnoSuccess)
			}},
		{Name: "environ_get", Params: sig(2, i32), Results: sig(1, i32), Allow: wasm.AllowStartup,
			Fn: func(g Guest, m api.Module, s []uint64) {
				arr, buf := uint32(s[0]), uint32(s[1])
				for _, e := range g.Env() {
					if !m.Memory().WriteUint32Le(arr, buf) || !m.Memory().WriteString(buf, e) || !m.Memory().WriteByte(buf+uint32(len(e)), 0) {
						ret(s, errnoFault)
						return
					}
					arr += 4
					buf += uint32(len(e) + 1)
				}
				ret(s, errnoSuccess)
			}},
		{Name: "args_sizes_get", Params: sig(2, i32), Results: sig(1, i32), Allow: wasm.AllowStartup,
			Fn: func(g Guest, m api.Module, s []uint64) {
				m.Memory().WriteUint32Le(uint32(s[0]), 0)
				m.Memory().WriteUint32Le(uint32(s[1]), 0)
				ret(s, errnoSuccess)
			}},
		{Name: "args_get", Params: sig(2, i32), Results: sig(1, i32), Allow: wasm.AllowStartup,
			Fn: func(g Guest, m api.Module, s []uint64) { ret(s, errnoSuccess) }},
		{Name: "clock_time_get", Params: []api.ValueType{i32, i64, i32}, Results: sig(1, i32), Allow: wasm.AllowStartup | wasm.AllowMalloc,
			Fn: func(g Guest, m api.Module, s []uint64) {
				var v uint64
				switch uint32(s[0]) {
				case 0:
					v = uint64(g.Now().UnixNano())
				case 1:
					v = g.Monotonic()
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
		{Name: "random_get", Params: sig(2, i32), Results: sig(1, i32), Allow: wasm.AllowStartup,
			Fn: func(g Guest, m api.Module, s []uint64) {
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
				g.Random(buf)
				ret(s, errnoSuccess)
			}},
		{Name: "proc_exit", Params: sig(1, i32),
			Fn: func(g Guest, m api.Module, s []uint64) {
				// cpp-host logs and returns; the Go runtime then traps on its own.
				g.Log(abi.LogError, fmt.Sprintf("wasi_unstable proc_exit(%d)", uint32(s[0])))
				g.Exit(int32(uint32(s[0])))
			}},
		{Name: "path_open", Params: []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i32, i32}, Results: sig(1, i32),
			Fn: func(g Guest, m api.Module, s []uint64) { ret(s, errnoNoent) }},
		{Name: "fd_prestat_get", Params: sig(2, i32), Results: sig(1, i32), Allow: wasm.AllowStartup,
			Fn: func(g Guest, m api.Module, s []uint64) { ret(s, errnoBadf) }},
		{Name: "fd_prestat_dir_name", Params: sig(3, i32), Results: sig(1, i32), Allow: wasm.AllowStartup, Fn: nosys},
		{Name: "sched_yield", Results: sig(1, i32), Fn: func(g Guest, m api.Module, s []uint64) { ret(s, errnoSuccess) }},
		{Name: "poll_oneoff", Params: sig(4, i32), Results: sig(1, i32), Allow: wasm.AllowStartupHead | wasm.AllowMallocHead,
			Fn: func(g Guest, m api.Module, s []uint64) {
				ret(s, pollOneoff(g, m, uint32(s[0]), uint32(s[3])))
			}},
		{Name: "clock_res_get", Params: sig(2, i32), Results: sig(1, i32), Allow: wasm.AllowStartupHead,
			Fn: func(g Guest, m api.Module, s []uint64) {
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
	for _, name := range addedHead {
		if p, ok := stubs[name]; ok {
			fs = append(fs, wasm.Func[Guest]{Name: name, Params: p, Results: sig(1, i32), Allow: wasm.AllowStartupHead, Fn: nosys})
		}
	}
	return fs
}

// Instantiate links the functions into rt under every name of ModuleNames, each wrapped by
// wrap (which finds the calling Guest, counts the call and enforces restricted phases).
func Instantiate(ctx context.Context, rt wazero.Runtime, wrap func(module string, f wasm.Func[Guest]) api.GoModuleFunction) error {
	for _, modName := range ModuleNames {
		b := rt.NewHostModuleBuilder(modName)
		for _, f := range Funcs() {
			b.NewFunctionBuilder().WithGoModuleFunction(wrap(modName, f), f.Params, f.Results).Export(f.Name)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return fmt.Errorf("wasi: %s: %w", modName, err)
		}
	}
	return nil
}

// fdWrite sends stdout to the info log and stderr to the error log, as cpp-host does.
func fdWrite(g Guest, m api.Module, fd, iovs, iovsLen, nwrittenPtr uint32) uint32 {
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
	level := abi.LogInfo
	if fd == 2 {
		level = abi.LogError
	}
	g.Stdio(fd, out, level)
	return errnoSuccess
}

// pollOneoff answers ENOSYS (Envoy ≤ 1.36) or, post-#533, no events at once.
func pollOneoff(g Guest, m api.Module, in, neventsPtr uint32) uint32 {
	if g.Mode() != CppHostHead {
		return errnoNosys
	}
	// A blocking clock subscription (type 0, relative timeout): the guest will busy-wait on
	// the clock; let virtual time pass by that timeout so it can make progress.
	if tag, ok := m.Memory().ReadByte(in + 8); ok && tag == 0 {
		if timeout, ok := m.Memory().ReadUint64Le(in + 24); ok && timeout > 0 {
			flags, _ := m.Memory().ReadUint16Le(in + 40)
			if flags&1 == 0 { // relative
				g.PassVirtual(time.Duration(timeout))
			}
		}
	}
	if !m.Memory().WriteUint32Le(neventsPtr, 0) {
		return errnoFault
	}
	return errnoSuccess
}
