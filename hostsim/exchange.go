package hostsim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Request is a whole downstream request for RunHTTP.
type Request struct {
	Headers [][2]string // must include :method, :path, :authority (and :scheme)
	// Body is sent as one chunk; BodyChunks, when set, as several (Body is then ignored).
	Body       []byte
	BodyChunks [][]byte
	Trailers   [][2]string
}

// UpstreamRequest is what reached the upstream after the filter.
type UpstreamRequest struct {
	Headers, Trailers [][2]string
	Body              []byte
}

// UpstreamResponse is the upstream's answer.
type UpstreamResponse struct {
	Headers    [][2]string // must include ":status"
	Body       []byte
	BodyChunks [][]byte // when set, sent as several chunks (Body is then ignored)
	Trailers   [][2]string
	// Delay is how long the upstream takes (virtual time with a virtual clock).
	Delay time.Duration
}

// Response is what the downstream client received.
type Response struct {
	StatusCode int
	Headers    [][2]string
	Body       []byte
	Trailers   [][2]string
	// LocalReply is the local reply the plugin sent, if any.
	LocalReply *LocalResponse
	// Reset holds the reset details when the stream was reset instead of answered.
	Reset string
	// Upstream is what reached the upstream (nil if the request never got there).
	Upstream *UpstreamRequest
	// VM names the worker that served the stream; ContextID is its context id there.
	VM        string
	ContextID uint32
}

// Exchange is one request being driven through a worker VM.
type Exchange struct {
	vm       *VM
	s        *httpStream // valid until done (the stream is then recycled)
	id       uint32
	gen      uint64
	ctx      context.Context
	cancel   context.CancelFunc
	upCalled bool
	upReq    *UpstreamRequest
	done     bool
	resp     *Response
	errs     []error
	doneCh   chan struct{}
}

// Done reports whether the exchange has finished.
func (ex *Exchange) Done() bool {
	select {
	case <-ex.doneCh:
		return true
	default:
		return false
	}
}

// Response returns the response once Done (nil before).
func (ex *Exchange) Response() *Response {
	if !ex.Done() {
		return nil
	}
	return ex.resp
}

func chunksOf(body []byte, chunks [][]byte) [][]byte {
	if chunks != nil {
		return chunks
	}
	if len(body) > 0 {
		return [][]byte{body}
	}
	return nil
}

// StartHTTP is StartHTTPContext with context.Background().
func (vm *VM) StartHTTP(req *Request) (*Exchange, error) {
	return vm.StartHTTPContext(context.Background(), req)
}

// StartHTTPContext sends a request into the VM as far as it goes without waiting: the
// filter may pause it (waiting for a callout, a queue notification, a tick). Events and
// timers move it on; Wait (or RunHTTP) waits for the end, Reset ends it early.
//
// The exchange's context (Context, and the ctx the UpstreamFunc gets) carries ctx's
// values and is cancelled when the exchange ends or is reset. ctx's own cancellation does
// not end the exchange: in Envoy only the stream's end (or a reset) cancels its upstream
// request, so a caller whose client went away calls Reset.
func (vm *VM) StartHTTPContext(ctx context.Context, req *Request) (*Exchange, error) {
	vm.mu.Lock()
	if vm.streams == nil {
		vm.mu.Unlock()
		return nil, errNotStarted
	}
	s := vm.newStream()
	ex := &Exchange{vm: vm, s: s, id: s.id, gen: vm.gen, doneCh: make(chan struct{})}
	ex.ctx, ex.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.ex = ex
	if err := vm.beginStream(s); err != nil {
		ex.errs = append(ex.errs, err)
	}
	ex.gen = vm.gen // FAIL_RELOAD may have replaced the instance
	if s.final == nil {
		chunks := chunksOf(req.Body, req.BodyChunks)
		_, err := s.onHeaders(&s.req, req.Headers, len(chunks) == 0 && req.Trailers == nil)
		ex.note(err)
		for i, c := range chunks {
			_, err = s.onBody(&s.req, c, i == len(chunks)-1 && req.Trailers == nil)
			ex.note(err)
		}
		if req.Trailers != nil {
			_, err = s.onTrailers(&s.req, req.Trailers)
			ex.note(err)
		}
	}
	ex.step()
	vm.mu.Unlock()
	return ex, vm.host.drain()
}

func (ex *Exchange) note(err error) {
	if err != nil {
		ex.errs = append(ex.errs, err)
	}
}

// step moves the exchange on after the stream changed (VM locked).
func (ex *Exchange) step() {
	if ex.done {
		return
	}
	s := ex.s
	switch {
	case s.reset != "" || s.final != nil || s.resp.complete:
		ex.finish()
	case s.req.complete && !s.req.halted && !ex.upCalled:
		ex.upCalled = true
		ex.upReq = &UpstreamRequest{Headers: clonePairs(s.req.headers), Body: append([]byte(nil), s.req.fwdBody...),
			Trailers: clonePairs(s.req.fwdTrailers)}
		ex.vm.host.post(event{kind: evUpstreamInvoke, ex: ex})
	}
}

// finish builds the downstream response and ends the stream (log → done → delete).
func (ex *Exchange) finish() {
	ex.done = true
	s := ex.s
	r := &Response{LocalReply: s.local, Reset: s.reset, Upstream: ex.upReq, VM: ex.vm.name, ContextID: s.id}
	switch {
	case s.reset != "":
	case s.final != nil:
		r.Headers = localReplyHeaders(s.final)
		r.Body = append([]byte(nil), s.final.Data...)
	default:
		r.Headers = clonePairs(s.resp.headers)
		r.Body = append([]byte(nil), s.resp.fwdBody...)
		r.Trailers = clonePairs(s.resp.fwdTrailers)
	}
	if v, ok := headerValue(r.Headers, ":status"); ok {
		r.StatusCode, _ = strconv.Atoi(v)
	}
	s.req.halted, s.resp.halted = true, true
	ex.note(s.complete())
	ex.resp = r
	ex.cancel()
	close(ex.doneCh)
}

// Context returns the exchange's context: it carries the values of the context the
// exchange was started with and is cancelled when the exchange ends or is reset. The
// UpstreamFunc is called with it.
func (ex *Exchange) Context() context.Context { return ex.ctx }

// Reset ends the exchange as Envoy ends a stream the downstream reset (a client that went
// away, or a front end that gave up on it): whatever the filter was waiting for, the
// stream runs proxy_on_log, proxy_on_done and proxy_on_delete and is gone from its VM;
// continue or a local reply it had pending is dropped; its callouts still complete on the
// root context; the upstream call, if any, sees the exchange's context cancelled. The
// response then has Reset set to details (ResetDownstreamRemoteDisconnect if empty). The
// error wraps ErrNoStream if the exchange had already ended, and otherwise joins guest
// traps in the lifecycle callbacks.
func (ex *Exchange) Reset(details string) error {
	if details == "" {
		details = ResetDownstreamRemoteDisconnect
	}
	vm := ex.vm
	vm.mu.Lock()
	if ex.done {
		vm.mu.Unlock()
		return fmt.Errorf("%w: %s: stream %d already ended", ErrNoStream, vm.name, ex.id)
	}
	err := ex.s.resetDownstream(details)
	vm.mu.Unlock()
	return joinErr(err, vm.host.drain())
}

func (ex *Exchange) finishFailedVM() {
	ex.vm.mu.Lock()
	defer ex.vm.mu.Unlock()
	if ex.done {
		return
	}
	ex.s.reset = "VM gone"
	ex.finish()
}

// invokeUpstream calls the upstream outside the VM (on its own goroutine with a real clock).
func (h *Host) invokeUpstream(ex *Exchange) {
	run := func() {
		var resp *UpstreamResponse
		err := errors.New("no upstream configured")
		if h.cfg.upstream != nil {
			resp, err = h.cfg.upstream(ex.ctx, ex.upReq)
		}
		if err == nil && resp == nil {
			err = errors.New("upstream returned no response")
		}
		ev := event{kind: evUpstreamDeliver, vm: ex.vm, gen: ex.gen, ex: ex, up: resp, upErr: err}
		if err == nil && resp.Delay > 0 {
			h.schedule(h.clock.Now().Add(resp.Delay), ev)
			return
		}
		h.post(ev)
	}
	if h.realtime {
		go run()
		return
	}
	run()
}

// deliverUpstream encodes the upstream response through the filter (VM locked). An
// upstream error becomes the router's 503, which the filter sees like any response.
func (ex *Exchange) deliverUpstream(resp *UpstreamResponse, upErr error) error {
	if ex.done {
		return nil
	}
	s := ex.s
	if upErr != nil {
		body := "upstream connect error or disconnect/reset before headers. reset reason: connection failure"
		resp = &UpstreamResponse{Headers: [][2]string{{":status", "503"}, {"content-length", strconv.Itoa(len(body))},
			{"content-type", "text/plain"}}, Body: []byte(body)}
		ex.vm.host.log(ex.vm, LogDebug, fmt.Sprintf("upstream error: %v", upErr))
	}
	n := len(ex.errs)
	chunks := chunksOf(resp.Body, resp.BodyChunks)
	_, err := s.onHeaders(&s.resp, resp.Headers, len(chunks) == 0 && resp.Trailers == nil)
	ex.note(err)
	for i, c := range chunks {
		_, err = s.onBody(&s.resp, c, i == len(chunks)-1 && resp.Trailers == nil)
		ex.note(err)
	}
	if resp.Trailers != nil {
		_, err = s.onTrailers(&s.resp, resp.Trailers)
		ex.note(err)
	}
	ex.step()
	if len(ex.errs) > n {
		return errors.Join(ex.errs[n:]...)
	}
	return nil
}

// Wait waits for the exchange to finish. With a virtual clock it moves the clock to the
// next timer while the stream is paused, up to the host's maximum virtual wait; with a real
// clock it blocks until the end or ctx is done. The error joins guest traps seen on the way.
func (ex *Exchange) Wait(ctx context.Context) (*Response, error) {
	h := ex.vm.host
	if h.realtime {
		select {
		case <-ex.doneCh:
			return ex.resp, ex.err()
		case <-ctx.Done():
			return nil, fmt.Errorf("hostsim: waiting for stream %d: %w", ex.id, ctx.Err())
		}
	}
	deadline := h.clock.Now().Add(h.cfg.maxVirtualWait)
	var errs []error
	for !ex.Done() {
		if err := h.drainNow(); err != nil {
			errs = append(errs, err)
		}
		if ex.Done() {
			break
		}
		next, ok := h.NextTimer()
		if !ok {
			return nil, errors.Join(append(errs, fmt.Errorf("hostsim: stream %d stalled: paused with nothing scheduled to resume it", ex.id))...)
		}
		if next.After(deadline) {
			return nil, errors.Join(append(errs, fmt.Errorf("hostsim: stream %d still paused after %v of virtual time", ex.id, h.cfg.maxVirtualWait))...)
		}
		if err := h.Advance(next.Sub(h.clock.Now())); err != nil {
			errs = append(errs, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return ex.resp, errors.Join(append(errs, ex.err())...)
}

func (ex *Exchange) err() error { return errors.Join(ex.errs...) }

// RunHTTP drives a whole request through this VM, like Envoy's filter manager with this
// filter and the router: request headers/body/trailers through the filter (honouring
// pause and continue), the upstream (WithUpstream), the response back through the filter,
// then log → done → delete. When ctx ends first the caller is the client that went away:
// the stream is reset (ResetDownstreamRemoteDisconnect) and ctx's error returned.
func (vm *VM) RunHTTP(ctx context.Context, req *Request) (*Response, error) {
	ex, err := vm.StartHTTPContext(ctx, req)
	if ex == nil {
		return nil, err
	}
	resp, werr := ex.Wait(ctx)
	if resp == nil && ctx.Err() != nil {
		rerr := ex.Reset(ResetDownstreamRemoteDisconnect)
		if errors.Is(rerr, ErrNoStream) && ex.Done() { // it ended meanwhile after all
			return ex.Response(), joinErr(err, ex.err())
		}
		werr = joinErr(werr, rerr)
	}
	return resp, joinErr(err, werr)
}

// RunHTTP drives a request through a worker VM, chosen round-robin like Envoy's
// connection balancing.
func (h *Host) RunHTTP(ctx context.Context, req *Request) (*Response, error) {
	if len(h.workers) == 0 {
		return nil, errNotStarted
	}
	n := h.rr.Add(1) - 1
	return h.workers[int(n%uint64(len(h.workers)))].RunHTTP(ctx, req)
}
