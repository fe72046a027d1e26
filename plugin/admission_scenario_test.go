package main

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// oneSlotPolicy: one key that serves one request at a time, with a long queue budget and a
// long execution limit (so only a heartbeat can free a dead worker's slot in time).
const oneSlotPolicy = `
providers:
  - id: glm
    cluster: openai
    connections:
      - id: glm-1
        credential: {header: authorization, value: "Bearer glm"}
        maxConcurrent: 1
routes:
  - model: glm-4.7
    targets:
      - {provider: glm, connection: glm-1}
resilience:
  requestQueue: {maxWaitMs: %d, executionMaxWaitMs: 600000}
`

// A worker VM that traps mid-request under FAIL_RELOAD gets no on_done: nothing releases the
// slot its request holds. Another worker's waiting request gets that slot once the dead VM's
// heartbeat is older than the bound (6 s, README "Admission"), not after executionMaxWait
// (10 min here): it is sent between 3 s (the VM beats every 2 s, at its 1 s idle tick) and
// 6.5 s after the trap (seen in steps of 250 ms).
func TestScenarioADeadWorkersSlotGoesToAnotherWithinTheBound(t *testing.T) {
	w := newWorld(t, fmt.Sprintf(oneSlotPolicy, 30000), 2, hostsim.WithFailurePolicy(hostsim.FailReload))
	var calls atomic.Int32
	w.fakes.set("glm", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		if calls.Add(1) == 1 {
			r.Delay = time.Hour // the first request is still running when its VM dies
		}
		return r
	})
	w.start(0, chatReq("glm-4.7"))
	w.advance(2500 * time.Millisecond) // both VMs heartbeat meanwhile
	second := w.start(1, chatReq("glm-4.7"))
	w.advance(100 * time.Millisecond)
	if second.Done() || w.fakes.count("glm") != 1 {
		t.Fatalf("second request done=%v, upstream calls %d: it must wait for the slot", second.Done(), w.fakes.count("glm"))
	}
	w.host.Host.Worker(0).Fail("trapped mid-request")
	failed := w.host.Clock().Now()
	var sent time.Duration
	for w.host.Clock().Now().Sub(failed) < 20*time.Second {
		w.advance(250 * time.Millisecond)
		if w.fakes.count("glm") == 2 {
			sent = w.host.Clock().Now().Sub(failed)
			break
		}
	}
	if sent <= 3*time.Second || sent > 6500*time.Millisecond {
		t.Fatalf("the waiting request was sent %v after the holder's VM failed, want between 3 s and 6.5 s", sent)
	}
	expect(t, "second", w.wait(second), 200, "glm/glm-1/glm-4.7/1")
}

// Every plugin start on a VM — an ECDS update retunes the policy on the VMs it runs on —
// registers the VM's one wake queue again instead of a new one (proxy-wasm has no call to
// unregister a queue): 100 retunes leave the process's queue count as it was, and a
// waiting request still resumes through the wake-up (at once when its slot frees, not at
// the next tick), which now reaches the newest plugin.
func TestScenarioRetunesKeepOneWakeQueuePerVM(t *testing.T) {
	w := newWorld(t, fmt.Sprintf(oneSlotPolicy, 30000), 2)
	before := w.host.Host.Process().QueueCount() // one per VM: the canary's, the main thread's, the workers'
	for i := range 100 {
		config, err := policyfile.ToJSON([]byte(fmt.Sprintf(oneSlotPolicy, 20000+i)))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := w.host.Host.Retune(config); err != nil || !ok {
			t.Fatalf("retune %d: %v %v", i, ok, err)
		}
	}
	if n := w.host.Host.Process().QueueCount(); n != before {
		t.Fatalf("%d queues after 100 retunes, want %d", n, before)
	}
	var calls atomic.Int32
	w.fakes.set("glm", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		if calls.Add(1) == 1 {
			r.Delay = 3 * time.Second
		}
		return r
	})
	first := w.start(0, chatReq("glm-4.7"))
	w.advance(50 * time.Millisecond)
	second := w.start(1, chatReq("glm-4.7"))
	r1 := w.wait(first)
	freed := w.host.Clock().Now()
	expect(t, "first", r1, 200, "glm/glm-1/glm-4.7/1")
	r2 := w.wait(second)
	expect(t, "second", r2, 200, "glm/glm-1/glm-4.7/1")
	calls2 := w.fakes.received()
	if gap := calls2[1].at.Sub(freed); gap > 10*time.Millisecond {
		t.Fatalf("the waiting request was sent %v after the slot freed: the wake-up did not reach it", gap)
	}
	w.noStreamsLeft()
}
