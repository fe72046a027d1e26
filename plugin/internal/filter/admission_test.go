package filter

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/stats"
)

// cappedPolicy: one key that takes one request at a time.
const cappedPolicy = `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}, maxConcurrent: 1}
routes:
  - model: gpt-4o
    targets: [{provider: openai}]
`

// flakyStore makes the connection's lease record fail: a Set loses its CAS race (state.Update
// then runs out of attempts after state.MaxCASAttempts losses), a Get fails outright.
type flakyStore struct {
	state.Store
	failSets, failGets int // how many more to fail (-1: every one)
	leaseGets          int // Gets of a lease record so far
}

var errSharedDataDown = errors.New("shared data down")

func isLeaseKey(key string) bool { return strings.HasPrefix(key, state.KeyLease.Prefix()) }

func (f *flakyStore) Set(key string, v []byte, cas uint32) error {
	if isLeaseKey(key) && f.failSets != 0 {
		if f.failSets > 0 {
			f.failSets--
		}
		return state.ErrCasMismatch
	}
	return f.Store.Set(key, v, cas)
}

func (f *flakyStore) Get(key string) ([]byte, uint32, bool, error) {
	if isLeaseKey(key) {
		f.leaseGets++
	}
	if isLeaseKey(key) && f.failGets != 0 {
		if f.failGets > 0 {
			f.failGets--
		}
		return nil, 0, false, errSharedDataDown
	}
	return f.Store.Get(key)
}

// storeHost starts a proxytest host whose engine works on a flakyStore.
func storeHost(t *testing.T, policy string, hook func(string)) (proxytest.HostEmulator, *manualclock.Clock, *vmContext, *flakyStore) {
	t.Helper()
	clk := manualclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	flaky := &flakyStore{}
	vm := &vmContext{beforeCallback: hook, timeNow: clk.Now, wrapStore: func(s state.Store) state.Store {
		flaky.Store = s
		return flaky
	}}
	opt := proxytest.NewEmulatorOption().WithVMContext(vm).WithPluginConfiguration(policyJSON(t, policy))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v", st)
	}
	return host, clk, vm, flaky
}

// sendChat sends a chat request's headers and body and returns its stream id.
func sendChat(host proxytest.HostEmulator) uint32 {
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, chatHeaders("/v1/chat/completions"), false)
	host.CallOnRequestBody(id, []byte(`{"model":"gpt-4o"}`), true)
	return id
}

// storeErrors reads spillway_admission_store_errors_total by outcome (after a tick's flush).
func storeErrors(t *testing.T, host proxytest.HostEmulator) (retried, failedOpen uint64) {
	t.Helper()
	retried, _ = host.GetCounterMetric(stats.AdmissionStoreErrors.Stat(stats.StoreRetried))
	failedOpen, _ = host.GetCounterMetric(stats.AdmissionStoreErrors.Stat(stats.StoreFailedOpen))
	return retried, failedOpen
}

// tickAfter moves the clock and ticks.
func tickAfter(host proxytest.HostEmulator, clk *manualclock.Clock, d time.Duration) {
	clk.Advance(d)
	host.Tick()
}

// An admission that loses its CAS race past the CAS loop's bound is not sent without a slot
// (as it was): the request stays paused, and a later tick admits it — with its slot, so the
// next request waits for it. The retry is counted.
func TestAStoreErrorAtAdmissionIsRetriedOnALaterTick(t *testing.T) {
	host, clk, _, flaky := storeHost(t, cappedPolicy, nil)
	flaky.failSets = state.MaxCASAttempts // exactly one admission runs out of attempts
	a := sendChat(host)
	if act := host.GetCurrentHttpStreamAction(a); act != types.ActionPause {
		t.Fatalf("after a lost CAS race the request is %v, want it paused", act)
	}
	tickAfter(host, clk, 400*time.Millisecond) // past any retry delay (1 to 3 busy ticks)
	if act := host.GetCurrentHttpStreamAction(a); act != types.ActionContinue {
		t.Fatalf("after the retry the request is %v, want it sent", act)
	}
	b := sendChat(host)
	if act := host.GetCurrentHttpStreamAction(b); act != types.ActionPause {
		t.Fatalf("the next request is %v, want it queued behind the first one's slot", act)
	}
	host.Tick()
	if r, f := storeErrors(t, host); r != 1 || f != 0 {
		t.Fatalf("store errors: retried %d, failed_open %d; want 1 and 0", r, f)
	}
}

// A store error that persists fails open once: after the fifth error in a row (README,
// "Admission") the request goes without a slot; every error before it is a retry.
func TestAStoreErrorThatPersistsFailsOpenOnce(t *testing.T) {
	host, clk, _, flaky := storeHost(t, cappedPolicy, nil)
	flaky.failSets = -1
	a := sendChat(host)
	ticks := 0
	for ; host.GetCurrentHttpStreamAction(a) == types.ActionPause && ticks < 20; ticks++ {
		tickAfter(host, clk, 300*time.Millisecond)
	}
	if act := host.GetCurrentHttpStreamAction(a); act != types.ActionContinue {
		t.Fatalf("after %d ticks the request is %v, want it sent without a slot", ticks, act)
	}
	host.Tick()
	if r, f := storeErrors(t, host); r != 4 || f != 1 {
		t.Fatalf("store errors: retried %d, failed_open %d; want 4 and 1", r, f)
	}
	if lr := host.GetSentLocalResponse(a); lr != nil {
		t.Fatalf("the request was answered %d", lr.StatusCode)
	}
}

// A queued request whose poll meets a store error is not answered 500 (as it was): it stays
// queued and is granted once the store recovers; the release that met the error is retried
// by the admitter.
func TestAStoreErrorOnAQueuedRequestKeepsItQueued(t *testing.T) {
	host, clk, _, flaky := storeHost(t, cappedPolicy, nil)
	a := sendChat(host)
	b := sendChat(host)
	if act := host.GetCurrentHttpStreamAction(b); act != types.ActionPause {
		t.Fatalf("second request %v, want it queued", act)
	}
	flaky.failGets = 3
	host.CallOnResponseHeaders(a, [][2]string{{":status", "200"}}, false)
	host.CallOnResponseBody(a, []byte(`{}`), true)
	host.CompleteHttpContext(a) // its release fails: retried by the admitter at the next tick
	tickAfter(host, clk, 100*time.Millisecond)
	if lr := host.GetSentLocalResponse(b); lr != nil {
		t.Fatalf("the queued request was answered %d %s", lr.StatusCode, lr.Data)
	}
	for i := 0; i < 10 && host.GetCurrentHttpStreamAction(b) == types.ActionPause; i++ {
		tickAfter(host, clk, 300*time.Millisecond)
	}
	if act := host.GetCurrentHttpStreamAction(b); act != types.ActionContinue {
		t.Fatalf("the queued request is %v after the store recovered, want it sent", act)
	}
	if lr := host.GetSentLocalResponse(b); lr != nil {
		t.Fatalf("the queued request was answered %d %s", lr.StatusCode, lr.Data)
	}
	host.Tick()
	if r, f := storeErrors(t, host); r != 3 || f != 0 {
		t.Fatalf("store errors: retried %d, failed_open %d; want 3 (the release twice, the poll once) and 0", r, f)
	}
}

// A panic in OnHttpStreamDone still gives the slot back, unlinks the stream and keeps its
// context for reuse with nothing of the stream left in it; a panic in the release itself
// (whose slot then waits for its lease to expire) skips neither of the others.
func TestAPanicAtStreamDoneLeavesNoSlotAndNoDirtyContext(t *testing.T) {
	for _, tc := range []struct {
		where    string // the callback hook that panics
		slotBack bool   // the slot is free for the next request
	}{
		{"stream done", true},
		{"stream done: release", false},
	} {
		t.Run(tc.where, func(t *testing.T) {
			var boom bool
			host, _, vm, _ := storeHost(t, cappedPolicy, func(cb string) {
				if boom && cb == tc.where {
					panic("boom at " + tc.where)
				}
			})
			a := sendChat(host)
			if act := host.GetCurrentHttpStreamAction(a); act != types.ActionContinue {
				t.Fatalf("first request %v", act)
			}
			host.CallOnResponseHeaders(a, [][2]string{{":status", "200"}}, false)
			host.CallOnResponseBody(a, []byte(`{}`), true)
			boom = true
			host.CompleteHttpContext(a)
			boom = false
			p := vm.plugins[0]
			if len(p.free) != 1 {
				t.Fatalf("%d contexts kept for reuse, want the ended one", len(p.free))
			}
			if h := p.free[0]; !reflect.DeepEqual(h.streamState, streamState{}) {
				t.Fatalf("the kept context holds the ended stream's state: %+v", h.streamState)
			}
			if n := len(vm.links.linked); n != 0 {
				t.Fatalf("%d router links left", n)
			}
			if logs := strings.Join(host.GetErrorLogs(), "\n"); !strings.Contains(logs, "panic") {
				t.Fatalf("error logs %q do not report the panic", logs)
			}
			if !tc.slotBack {
				return
			}
			b := sendChat(host)
			if act := host.GetCurrentHttpStreamAction(b); act != types.ActionContinue {
				t.Fatalf("the next request is %v: the panicked stream kept its slot", act)
			}
		})
	}
}

// A wake-up names the gate whose slot freed: a VM polls its waiters for that gate, and one
// for a gate it has no waiters for costs it no shared-data read.
func TestAWakeUpPollsOnlyTheGateItNames(t *testing.T) {
	const twoKeys = `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}, maxConcurrent: 1}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}, maxConcurrent: 1}
routes:
  - model: gpt-4o
    targets: [{provider: openai, connection: key-a}]
`
	host, _, vm, flaky := storeHost(t, twoKeys, nil)
	sendChat(host)
	b := sendChat(host)
	if act := host.GetCurrentHttpStreamAction(b); act != types.ActionPause {
		t.Fatalf("second request %v, want it queued on key-a", act)
	}
	gate := func(connection string) []byte { // the gate of the connection's account: its credential at cluster openai
		account := state.AccountID(state.UpstreamID("openai", ""), "authorization", "Bearer sk-"+strings.TrimPrefix(connection, "key-"))
		g, err := admission.NewGate(admission.GateConfig{Provider: "openai", Connection: connection, Account: account, MaxConcurrent: 1})
		if err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.AppendUint64(nil, g.ID())
	}
	before := flaky.leaseGets
	if err := proxywasm.EnqueueSharedQueue(vm.wakeQID, gate("key-b")); err != nil {
		t.Fatal(err)
	}
	if n := flaky.leaseGets - before; n != 0 {
		t.Fatalf("a wake-up for key-b made %d lease reads on a VM whose only waiter is on key-a", n)
	}
	if err := proxywasm.EnqueueSharedQueue(vm.wakeQID, gate("key-a")); err != nil {
		t.Fatal(err)
	}
	if n := flaky.leaseGets - before; n != 1 {
		t.Fatalf("a wake-up for key-a made %d lease reads, want its one waiter's poll", n)
	}
}
