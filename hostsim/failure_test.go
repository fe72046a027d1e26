package hostsim_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// time.Sleep needs poll_oneoff: Envoy 1.33's ENOSYS kills the Go runtime ("poll_oneoff
// failed"), cpp-host head and wazero let it live. A trap comes back as an error naming the
// callback, never a panic.
func TestSleepByWASIMode(t *testing.T) {
	for _, tc := range []struct {
		mode      hostsim.WASIMode
		wantFatal string // guest's fatal line; "" = lives
	}{
		{hostsim.WASIEnvoy133, "fatal error: poll_oneoff failed"},
		{hostsim.WASICppHostHead, ""},
		{hostsim.WASIWazero, ""},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			h := probe(t, "request_headers sleep 50", hostsim.WithWASI(tc.mode))
			before := h.Clock().Now()
			id := h.InitializeHttpContext()
			_, err := h.Host.CallOnRequestHeaders(id, getReq, true)
			if tc.wantFatal == "" {
				if err != nil {
					t.Fatalf("died: %v", err)
				}
				requireTrace(t, h.Host, "worker-0", "cb request_headers")
				if !hostsimtest.ContainsLine(h.GetInfoLogs(), "slept") {
					t.Fatal("sleep did not return")
				}
				if d := h.Clock().Now().Sub(before); d < 50e6 {
					t.Fatalf("virtual clock moved %v during a 50ms sleep", d)
				}
				return
			}
			var te *hostsim.TrapError
			if !errors.As(err, &te) || te.Callback != "proxy_on_request_headers" || te.VM != "worker-0" {
				t.Fatalf("want a TrapError in proxy_on_request_headers on worker-0, got %v", err)
			}
			if te.Fatal != tc.wantFatal {
				t.Fatalf("guest fatal line %q, want %q", te.Fatal, tc.wantFatal)
			}
		})
	}
}

// After a trap the VM is failed; later streams follow the failure policy. Only FAIL_RELOAD
// replaces the VM, at its next stream (Envoy's PluginConfig::maybeReloadHandleIfNeeded,
// source/extensions/common/wasm/wasm.cc, counting vm_reload_success); a Host that sets no
// policy models the one the generated Envoy configuration sets, FAIL_RELOAD.
func TestFailurePolicies(t *testing.T) {
	script := "request_headers@2 trap\nrequest_headers add_header 0 x-filter ran"
	for _, tc := range []struct {
		name        string
		policy      []hostsim.Option // WithFailurePolicy, or none for the default
		wantStatus  int              // status the second request gets
		wantFilter  bool             // the filter ran on the second request
		wantReInits int              // extra init runs on worker-0 (= replacements)
	}{
		{"FAIL_CLOSED", []hostsim.Option{hostsim.WithFailurePolicy(hostsim.FailClosed)}, 503, false, 0},
		{"FAIL_OPEN", []hostsim.Option{hostsim.WithFailurePolicy(hostsim.FailOpen)}, 200, false, 0},
		{"FAIL_RELOAD", []hostsim.Option{hostsim.WithFailurePolicy(hostsim.FailReload)}, 200, true, 1},
		{"default", nil, 200, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reloads := tc.wantReInits > 0
			h := probe(t, script, append(tc.policy, hostsim.WithEnv("PROBE_INIT", "init log 2 init"),
				hostsim.WithUpstream(func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
					v, _ := headerOf(r.Headers, "x-filter")
					return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200", "x-saw", v)}, nil
				}))...)
			w := h.Host.Worker(0)
			resp, err := w.RunHTTP(context.Background(), &hostsim.Request{Headers: getReq})
			var te *hostsim.TrapError
			if !errors.As(err, &te) || !strings.Contains(te.Error(), "out of bounds memory access") {
				t.Fatalf("first request: want the trap, got %v", err)
			}
			if tc.name != "FAIL_OPEN" && (resp == nil || resp.StatusCode != 503 || resp.LocalReply != nil) {
				t.Fatalf("trapping stream answered %+v", resp)
			}
			if hl := w.Health(); hl.Failed == nil || hl.Failures != 1 || hl.Recovers != reloads || hl.Reloads != 0 {
				t.Fatalf("after the trap: %+v; want failed once, Recovers=%v, no reload yet", hl, reloads)
			}
			resp, err = w.RunHTTP(context.Background(), &hostsim.Request{Headers: getReq})
			if err != nil {
				t.Fatalf("second request: %v", err)
			}
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("second request status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if saw, _ := headerOf(resp.Headers, "x-saw"); (saw == "ran") != tc.wantFilter {
				t.Fatalf("filter ran=%v on the second request, want %v", saw == "ran", tc.wantFilter)
			}
			if tc.wantStatus == 503 {
				// Envoy's Context::failStream: sendLocalReply(503, ..., "wasm_fail_stream").
				if v, _ := headerOf(resp.Headers, ":status"); v != "503" || resp.Upstream != nil || resp.Details != "wasm_fail_stream" {
					t.Fatalf("fail-closed reply %+v (details %q)", resp, resp.Details)
				}
			}
			inits := 0
			for _, l := range h.Logs() {
				if l.VM == "worker-0" && l.Message == "init" {
					inits++
				}
			}
			if inits != tc.wantReInits {
				t.Fatalf("worker-0 re-initialized %d times, want %d", inits, tc.wantReInits)
			}
			hl := w.Health()
			if (hl.Failed == nil) != reloads || hl.Reloads != uint64(tc.wantReInits) || hl.ReloadFailures != 0 || hl.Failures != 1 {
				t.Fatalf("after the second request: %+v; want failed=%v, %d reloads", hl, !reloads, tc.wantReInits)
			}
		})
	}
}
