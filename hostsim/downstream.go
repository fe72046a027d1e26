package hostsim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/connmgr"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/filtermanager"
)

// The exchange's machinery on the client's side, under the API in exchange.go: the stream's
// start under the failure policy, the client's scripted request parts and their timers, the
// connection manager's stream idle timer, what reaches the client (step, stepClient), flow
// control, and the end (finish builds the Response and completes the stream). The
// upstream's side is router.go.

func chunksOf(body []byte, chunks [][]byte) [][]byte {
	if chunks != nil {
		return chunks
	}
	if len(body) > 0 {
		return [][]byte{body}
	}
	return nil
}

func delayAt(delays []time.Duration, i int) time.Duration {
	if i < len(delays) {
		return delays[i]
	}
	return 0
}

// ErrNoPlugin is wrapped by the error of a Request whose Plugin names no WithPlugin plugin.
var ErrNoPlugin = errors.New("hostsim: no such plugin")

// newExchange allocates the stream in plugin's filter (a WithPlugin name; empty: the first
// plugin) and applies the failure policy (VM locked).
func (vm *VM) newExchange(ctx context.Context, record bool, plugin string) (*Exchange, error) {
	if vm.streams == nil {
		return nil, errNotStarted
	}
	var spec *pluginSpec
	if plugin != "" {
		for _, p := range vm.host.cfg.plugins {
			if p.name == plugin {
				spec = p
			}
		}
		if spec == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoPlugin, plugin)
		}
	}
	s := vm.newStream()
	ex := &Exchange{vm: vm, s: s, id: s.ID, gen: vm.gen, doneCh: make(chan struct{}), record: record,
		start: vm.host.clock.Now()}
	ex.ctx, ex.cancel = context.WithCancel(context.WithoutCancel(ctx))
	ex.upTry = ex.newTry()
	ex.idle = connmgr.NewIdleTimer((*modelStream)(ex), vm.host.cfg.streamIdleTimeout)
	s.ex = ex
	s.SetDriver((*modelStream)(ex))
	ex.touchStreamIdle() // armed when the connection manager creates the stream
	if err := vm.beginStream(s); err != nil {
		ex.errs = append(ex.errs, err)
	}
	if spec != nil {
		// Its plugin's root on the instance (a reload restarted it); none on a failed VM,
		// whose stream already follows the failure policy.
		s.root = vm.rootOf(spec)
	}
	ex.gen = vm.gen // FAIL_RELOAD may have replaced the instance
	return ex, nil
}

func (ex *Exchange) note(err error) {
	if err != nil {
		ex.errs = append(ex.errs, err)
	}
}

// after runs f on the exchange d from now on the host's clock (VM locked when it runs).
// finish cancels what is still pending, so an ended exchange is not kept alive by its
// timers (the stream idle timer's check lies up to the timeout ahead).
func (ex *Exchange) after(d time.Duration, f func(ex *Exchange) error) {
	h := ex.vm.host
	if ex.done {
		return
	}
	if len(ex.timers) == cap(ex.timers) && len(ex.timers) >= 8 {
		// Forget the timers that fired, so a long stream (a per-try idle timer re-armed by
		// every chunk) keeps what is pending only.
		live := ex.timers[:0]
		for _, t := range ex.timers {
			if h.loop.Pending(t) {
				live = append(live, t)
			}
		}
		clear(ex.timers[len(live):])
		ex.timers = live
	}
	ex.timers = append(ex.timers, h.schedule(h.clock.Now().Add(d), event{kind: evExchange, vm: ex.vm, gen: ex.gen, ex: ex, exFn: f}))
}

// stopTimers cancels the exchange's pending timers (VM locked; finish).
func (ex *Exchange) stopTimers() {
	for i, t := range ex.timers {
		ex.vm.host.cancel(t)
		ex.timers[i] = nil
	}
	ex.timers = nil
}

// runEvent runs a timer's work on a live exchange (VM locked).
func (ex *Exchange) runEvent(f func(ex *Exchange) error) error {
	if ex.done {
		return nil
	}
	n := len(ex.errs)
	ex.note(f(ex))
	ex.step()
	return errors.Join(ex.errs[n:]...)
}

// feedRequest delivers the scripted body chunks and trailers that are due (VM locked).
func (ex *Exchange) feedRequest() {
	s := ex.s
	for !ex.done && ex.reqNext < len(ex.reqChunks) {
		i := ex.reqNext
		if d := delayAt(ex.reqDelays, i); d > 0 && !ex.reqDue {
			ex.reqDue = true
			ex.after(d, func(ex *Exchange) error { ex.feedRequest(); return nil })
			return
		}
		ex.reqDue = false
		ex.reqNext++
		last := i == len(ex.reqChunks)-1
		ex.fromClient(last && ex.reqTrailers == nil)
		_, err := s.OnBody(&s.Req, ex.reqChunks[i], last && ex.reqTrailers == nil)
		ex.note(err)
	}
	if !ex.done && ex.reqTrailers != nil && !ex.reqTrlSent {
		ex.reqTrlSent = true
		ex.fromClient(true)
		_, err := s.OnTrailers(&s.Req, ex.reqTrailers)
		ex.note(err)
	}
}

// waitBelow locks the VM once the exchange is live and held (if given) is below the buffer
// limit; with a virtual clock it never waits. On error the VM is unlocked.
func (ex *Exchange) waitBelow(ctx context.Context, held func(*Exchange) int) error {
	vm := ex.vm
	for {
		vm.mu.Lock()
		if !ex.live() {
			vm.mu.Unlock()
			return fmt.Errorf("%w: %s: stream %d already ended", ErrNoStream, vm.name, ex.id)
		}
		if held == nil || !vm.host.realtime || held(ex) < ex.s.BufferLimit() {
			return nil
		}
		ch := ex.waitCh()
		vm.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// requestHeld is the request data the stream holds without passing it on: held back at
// paused headers (stop-all) and waiting for the upstream to read it.
func (ex *Exchange) requestHeld() int {
	n := len(ex.s.Req.HeldBody)
	if ex.call != nil {
		n += ex.call.body.Queued()
	}
	return n
}

// responseHeld is the response data the stream holds without the client having it: held
// back at paused headers (stop-all) and not yet read by the client (Next).
func (ex *Exchange) responseHeld() int {
	n := len(ex.s.Resp.HeldBody)
	if !ex.record {
		n += ex.queued
	}
	return n
}

// waitCh returns a channel closed at the exchange's next change (VM locked).
func (ex *Exchange) waitCh() chan struct{} {
	if ex.changed == nil {
		ex.changed = make(chan struct{})
	}
	return ex.changed
}

// signal wakes those waiting for a change (VM locked).
func (ex *Exchange) signal() {
	if ex.changed != nil {
		close(ex.changed)
		ex.changed = nil
	}
}

// emit records what reached the client (VM locked).
func (ex *Exchange) emit(ev ClientEvent) {
	ev.At = ex.vm.host.clock.Now()
	if ev.Kind == ClientHeaders {
		ex.sentHdrs = ev.Headers
	}
	ex.events = append(ex.events, ev)
	if !ex.record {
		ex.queued += len(ev.Data)
	}
}

// step moves the exchange on after the stream changed (VM locked): what passed the filter
// goes to the upstream and to the client, and the exchange finishes with the response.
func (ex *Exchange) step() {
	if ex.done {
		return
	}
	ex.stepRequest()
	if !ex.done {
		ex.stepTry(ex.upTry) // the upstream filter's side of the try in flight
	}
	if !ex.done { // the router may have answered and finished the exchange meanwhile
		ex.stepClient()
	}
	ex.signal()
}

// stepClient emits what passed the filter towards the client, and finishes the exchange
// once the response ended or the stream was reset or replaced.
func (ex *Exchange) stepClient() {
	s := ex.s
	switch {
	case s.ResetDetails != "":
		if !ex.clientGone {
			ex.emit(ClientEvent{Kind: ClientReset, Reset: s.ResetDetails})
		}
		ex.finish()
		return
	case s.Final != nil && !ex.cliHeaders:
		ex.cliHeaders = true
		ex.emit(ClientEvent{Kind: ClientHeaders, Headers: filtermanager.ReplyHeaders(s.Final)})
		if len(s.Final.Data) > 0 {
			ex.emit(ClientEvent{Kind: ClientData, Data: append([]byte(nil), s.Final.Data...)})
		}
		ex.emit(ClientEvent{Kind: ClientEnd})
		ex.finish()
		return
	}
	d := &s.Resp
	if d.ForwardedHeaders && !ex.cliHeaders {
		ex.cliHeaders = true
		ex.emit(ClientEvent{Kind: ClientHeaders, Headers: abi.ClonePairs(d.Headers)})
	}
	if ex.cliHeaders && len(d.ForwardedBody) > ex.cliSent {
		ex.emit(ClientEvent{Kind: ClientData, Data: append([]byte(nil), d.ForwardedBody[ex.cliSent:]...)})
		ex.cliSent = len(d.ForwardedBody)
		if !ex.record {
			d.ForwardedBody, ex.cliSent = d.ForwardedBody[:0], 0
		}
	}
	if d.Complete && ex.cliHeaders {
		if d.ForwardedTrailers != nil {
			ex.emit(ClientEvent{Kind: ClientTrailers, Headers: abi.ClonePairs(d.ForwardedTrailers)})
		}
		ex.emit(ClientEvent{Kind: ClientEnd})
		ex.finish()
	}
}

// finish builds the downstream response and ends the stream (log → done → delete).
func (ex *Exchange) finish() {
	if ex.done {
		return
	}
	ex.done = true
	s := ex.s
	r := &Response{LocalReply: s.Local, Reset: s.ResetDetails, VM: ex.vm.name, ContextID: s.ID, Start: ex.start}
	for _, t := range ex.tries {
		if t.upStarted && t.upReq != nil {
			r.Tries = append(r.Tries, t.upReq)
		}
	}
	if n := len(r.Tries); n > 0 {
		r.Upstream = r.Tries[n-1]
	}
	for _, ev := range ex.events {
		switch ev.Kind {
		case ClientHeaders:
			r.Headers = ev.Headers
		case ClientData:
			r.Body = append(r.Body, ev.Data...)
		case ClientTrailers:
			r.Trailers = ev.Headers
		}
	}
	if ex.record {
		r.Received = ex.events
	}
	if r.Headers == nil {
		r.Headers = ex.sentHdrs // stream mode: the events were handed out
	}
	if v, ok := abi.HeaderValue(r.Headers, ":status"); ok {
		r.StatusCode, _ = strconv.Atoi(v)
	}
	s.Req.Halted, s.Resp.Halted = true, true
	ex.abandonUpstream()
	if ex.retry != nil {
		ex.retry.Done() // a retry still holding the cluster's breaker lets go
	}
	ex.note(s.Complete())
	r.Flags, r.Details = s.Flags, s.Details
	ex.resp = r
	ex.stopTimers()
	ex.cancel()
	close(ex.doneCh)
	ex.signal()
}

// fromClient notes a request part the client sent (VM locked): it re-arms the stream idle
// timer (ActiveStream::decodeHeaders/decodeTrailers, FilterManager::decodeData), and eos
// completes the client's request.
func (ex *Exchange) fromClient(eos bool) {
	ex.touchStreamIdle()
	if eos {
		ex.clientEnded = true
	}
}

// touchStreamIdle re-arms the connection manager's stream idle timer after a headers, data
// or trailers event either way (VM locked).
func (ex *Exchange) touchStreamIdle() {
	if !ex.done {
		ex.idle.Touch()
	}
}

// streamIdleTimeout is ActiveStream::onIdleTimeout (connmgr.TimeoutReply). Its upstream
// request is reset with the stream (VM locked).
func (ex *Exchange) streamIdleTimeout() {
	r := connmgr.TimeoutReply(ex.clientEnded)
	ex.envoyReply(r.Code, r.Body, r.Flag, r.Details)
}

// live reports whether the exchange goes on (VM locked). A stream of a VM instance that
// FAIL_RELOAD replaced is gone: the exchange ends as "VM gone".
func (ex *Exchange) live() bool {
	if !ex.done && ex.vm.gen != ex.gen {
		ex.vmGone()
	}
	return !ex.done
}

// vmGone ends an exchange whose VM instance is gone: the client's stream is reset.
func (ex *Exchange) vmGone() {
	ex.s.ResetDetails = "VM gone"
	ex.emit(ClientEvent{Kind: ClientReset, Reset: ex.s.ResetDetails})
	ex.finish()
}

func (ex *Exchange) finishFailedVM() {
	ex.vm.mu.Lock()
	defer ex.vm.mu.Unlock()
	if !ex.done {
		ex.vmGone()
	}
}

func (ex *Exchange) err() error {
	ex.vm.mu.Lock()
	defer ex.vm.mu.Unlock()
	return errors.Join(ex.errs...)
}
