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

// After a trap the VM is failed; later streams follow the failure policy.
func TestFailurePolicies(t *testing.T) {
	script := "request_headers@2 trap\nrequest_headers add_header 0 x-filter ran"
	for _, tc := range []struct {
		policy      hostsim.FailurePolicy
		wantStatus  int  // status the second request gets
		wantFilter  bool // the filter ran on the second request
		wantReInits int  // extra init runs on worker-0
	}{
		{hostsim.FailClosed, 503, false, 0},
		{hostsim.FailOpen, 200, false, 0},
		{hostsim.FailReload, 200, true, 1},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			h := probe(t, script, hostsim.WithFailurePolicy(tc.policy), hostsim.WithEnv("PROBE_INIT", "init log 2 init"),
				hostsim.WithUpstream(func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
					v, _ := headerOf(r.Headers, "x-filter")
					return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200", "x-saw", v)}, nil
				}))
			w := h.Host.Worker(0)
			resp, err := w.RunHTTP(context.Background(), &hostsim.Request{Headers: getReq})
			var te *hostsim.TrapError
			if !errors.As(err, &te) || !strings.Contains(te.Error(), "out of bounds memory access") {
				t.Fatalf("first request: want the trap, got %v", err)
			}
			if tc.policy != hostsim.FailOpen && (resp == nil || resp.StatusCode != 503 || resp.LocalReply != nil) {
				t.Fatalf("trapping stream answered %+v", resp)
			}
			if w.Err() == nil && tc.policy != hostsim.FailReload {
				t.Fatal("VM not failed")
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
				if v, _ := headerOf(resp.Headers, ":status"); v != "503" || resp.Upstream != nil {
					t.Fatalf("fail-closed reply %+v", resp)
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
		})
	}
}
