package hostsim

import (
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/wasi"
)

// WASIMode chooses the WASI surface the guest sees (hostsim/internal/wasi).
type WASIMode = wasi.Mode

// WASI modes. The zero value is Envoy 1.33's, the default.
const (
	// WASIEnvoy133 is proxy-wasm-cpp-host from c4d7bb0 (Envoy 1.33) until #533 (first
	// pinned by Envoy 1.40): only the functions it registers exist (any other import fails
	// instantiation), poll_oneoff and fd_fdstat_set_flags answer ENOSYS (52), fd_write goes
	// to the log.
	WASIEnvoy133 = wasi.Envoy133
	// WASIEnvoy132 is cpp-host before #427 (Envoy ≤ 1.32): no poll_oneoff, sched_yield or
	// fd_fdstat_set_flags, so a Go module fails to load.
	WASIEnvoy132 = wasi.Envoy132
	// WASICppHostHead is cpp-host after #533 (94091cd): about 28 more stubs, and
	// poll_oneoff succeeds at once with no events. With a virtual clock a blocking poll
	// moves the clock by its timeout, as the busy-waiting guest would see time pass.
	WASICppHostHead = wasi.CppHostHead
	// WASIWazero is wazero's complete wasi_snapshot_preview1 (what the SDK's proxytest
	// runs), with the clocks and sleeps wired to the host's clock.
	WASIWazero = wasi.Wazero
)

// engineFor is the engine a mode's modules are compiled and linked on.
func engineFor(m WASIMode) engineKind {
	if m == WASIWazero {
		return engineWazero
	}
	return engineEnvoy
}

// The VM as the WASI functions see it (wasi.Guest); Log and Now serve the env functions too
// (hostfn.Logger, hostfn.Timers).

func (g *guest) Log(level abi.LogLevel, msg string) { g.host.log(g.vm(), level, msg) }

func (g *guest) Stdio(fd uint32, b []byte, level abi.LogLevel) { g.host.stdio(g.vm(), fd, b, level) }

func (g *guest) Env() []string { return g.host.cfg.env }

func (g *guest) Now() time.Time { return g.host.clock.Now() }

func (g *guest) Monotonic() uint64 { return g.host.monotonic() }

func (g *guest) Random(buf []byte) { g.host.random(buf) }

func (g *guest) Exit(code int32) { g.exitCode, g.exited = code, true }

func (g *guest) Mode() wasi.Mode { return g.host.cfg.wasi }

func (g *guest) PassVirtual(d time.Duration) {
	if vc, ok := g.host.clock.(SettableClock); ok && !g.host.realtime {
		vc.Set(vc.Now().Add(d))
	}
}
