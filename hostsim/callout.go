package hostsim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/callout"
	"github.com/spillwayproxy/spillway/hostsim/internal/sched"
)

// Callout is an HTTP callout a plugin dispatched with proxy_http_call. It belongs to the
// root context of the VM that made it (Envoy issues it on the root), whichever stream was
// the effective context.
type Callout struct {
	// Token is the callout id the guest received.
	Token uint32
	// VM names the VM that made the call.
	VM string
	// RootID is the owning root context; ContextID the effective context at the call.
	RootID, ContextID uint32
	// Upstream is the cluster name.
	Upstream string
	// Headers, Body and Trailers are what the plugin sent.
	Headers, Trailers [][2]string
	Body              []byte
	// Timeout is the requested timeout (0: none).
	Timeout time.Duration
	// Sent is the host time of the call.
	Sent time.Time

	vm      *VM
	gen     uint64
	done    bool
	timeout *sched.Timer[event] // cancelled once the callout is answered
}

// CalloutResponse answers a callout.
type CalloutResponse = callout.Response

// HttpCalloutAttribute is proxytest's view of a pending callout.
type HttpCalloutAttribute struct {
	CalloutID uint32
	Upstream  string
	Headers   [][2]string
	Trailers  [][2]string
	Body      []byte
}

// newCalloutToken allocates the next callout token (never 0).
func (h *Host) newCalloutToken() uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.callouts.NewToken()
}

// httpCall validates a callout as Envoy's Context::httpCall does (source/extensions/
// common/wasm/context.cc; callout.Check) and sends it: the root context owns it, the
// handler is asked asynchronously and its timeout is scheduled. up and body are views of
// guest memory.
func (vm *VM) httpCall(token uint32, up []byte, headers, trailers [][2]string, body []byte, timeout int32) Status {
	h := vm.host
	h.mu.Lock()
	clusters := h.cfg.clusters
	h.mu.Unlock()
	if st := callout.Check(up, clusters, headers, timeout); st != StatusOK {
		return st
	}
	headers, body, d := callout.Request(headers, body, timeout)
	c := &Callout{Token: token, VM: vm.name, RootID: vm.callerRoot(), ContextID: vm.callerRoot(), Upstream: string(up),
		Headers: headers, Trailers: trailers, Body: body, Timeout: d, Sent: h.clock.Now(), vm: vm, gen: vm.gen}
	if fr := vm.frame; fr != nil && fr.stream != nil {
		c.ContextID = fr.stream.ID
		fr.stream.callouts = append(fr.stream.callouts, c)
	}
	h.mu.Lock()
	h.callouts.Add(token, c)
	handler := h.cfg.calloutHandler
	h.mu.Unlock()
	if handler != nil {
		h.post(event{kind: evCalloutInvoke, callout: c})
	}
	if c.Timeout > 0 {
		c.timeout = h.schedule(c.Sent.Add(c.Timeout), event{kind: evCalloutTimeout, vm: vm, gen: vm.gen, callout: c})
	}
	return StatusOK
}

// invokeCallout asks the handler, outside the VM (on its own goroutine with a real clock).
func (h *Host) invokeCallout(c *Callout) {
	h.runHandler(func() {
		resp := h.cfg.calloutHandler(context.Background(), c)
		if resp == nil {
			return // unanswered: pending until it times out or the test answers
		}
		h.deliverAfter(resp.Delay, event{kind: evCalloutDeliver, vm: c.vm, gen: c.gen, callout: c, resp: resp})
	})
}

// deliverCallout runs proxy_on_http_call_response on the owning root (VM locked).
func (vm *VM) deliverCallout(c *Callout, resp *CalloutResponse, timedOut bool) error {
	h := vm.host
	h.mu.Lock()
	if c.done {
		h.mu.Unlock()
		return nil
	}
	c.done = true
	h.callouts.Remove(c.Token)
	timeout := c.timeout
	c.timeout = nil
	h.mu.Unlock()
	// An answered callout's timeout is taken off the loop, which would otherwise keep the
	// callout (its request and answer) until the timeout passed.
	h.cancel(timeout)
	if timedOut {
		resp = callout.TimeoutResponse()
	}
	fr := vm.rootFrameFor(c.RootID)
	var nh, nb, nt int
	cr, st, msg := callout.Received(resp)
	if cr != nil {
		fr.callout = cr
		nh, nb, nt = len(cr.Headers), len(cr.Body), len(cr.Trailers)
	}
	vm.status, vm.statusMsg = st, msg
	_, err := vm.call("proxy_on_http_call_response", vm.fns.httpCallResponse, fr,
		uint64(c.RootID), uint64(c.Token), uint64(nh), uint64(nb), uint64(nt))
	if err != nil {
		return err
	}
	vm.afterCallback()
	return nil
}

// CallOnHttpCallResponse answers a pending callout now (proxytest).
func (h *Host) CallOnHttpCallResponse(calloutID uint32, headers, trailers [][2]string, body []byte) error {
	return h.answer(calloutID, &CalloutResponse{Headers: headers, Trailers: trailers, Body: body})
}

// FailHttpCall makes a pending callout fail (reset) now.
func (h *Host) FailHttpCall(calloutID uint32) error {
	return h.answer(calloutID, &CalloutResponse{Fail: true})
}

func (h *Host) answer(token uint32, resp *CalloutResponse) error {
	h.mu.Lock()
	c, _ := h.callouts.Get(token)
	h.mu.Unlock()
	if c == nil {
		return fmt.Errorf("hostsim: no pending callout %d", token)
	}
	vm := c.vm
	vm.mu.Lock()
	var err error
	if vm.gen != c.gen || vm.isFailed() {
		err = errors.Join(errors.New("hostsim: the VM that made the callout is gone"), vm.failedErr())
	} else {
		err = vm.deliverCallout(c, resp, false)
	}
	vm.mu.Unlock()
	return joinErr(err, h.drain())
}

// PendingCallouts returns the callouts not answered yet, oldest first.
func (h *Host) PendingCallouts() []*Callout {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.callouts.All()
}

// GetCalloutAttributesFromContext returns the callouts a stream made (proxytest).
func (vm *VM) GetCalloutAttributesFromContext(contextID uint32) []HttpCalloutAttribute {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	s := vm.streams[contextID]
	if s == nil {
		return nil
	}
	out := make([]HttpCalloutAttribute, 0, len(s.callouts))
	for _, c := range s.callouts {
		out = append(out, HttpCalloutAttribute{CalloutID: c.Token, Upstream: c.Upstream, Headers: c.Headers,
			Trailers: c.Trailers, Body: c.Body})
	}
	return out
}
