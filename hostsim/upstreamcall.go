package hostsim

import (
	"context"
	"errors"
	"io"

	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/router"
)

// UpstreamStreamFunc is an upstream that streams both ways (WithStreamingUpstream). hostsim
// calls it on its own goroutine as soon as the request headers have passed the filter, as
// Envoy's router opens the upstream request in decodeHeaders; it reads the request body as
// it passes the filter from call.Body and answers through call's methods, which deliver
// each part to the filter as it comes.
type UpstreamStreamFunc func(call *UpstreamCall)

// UpstreamCall is one streaming upstream request. Its methods are safe to call from the
// upstream's goroutine; once the exchange no longer takes the answer (it ended, or the
// router gave up) they return an error wrapping ErrUpstreamGone and the context is done.
type UpstreamCall struct {
	ex      *Exchange
	t       *upTry // the try it serves
	ctx     context.Context
	headers [][2]string
	cluster string

	body      router.RequestBody // guarded by the VM's lock
	responded bool
}

// Context is cancelled when the exchange ends, the client goes away, or the router gives
// up on the upstream (a timeout).
func (c *UpstreamCall) Context() context.Context { return c.ctx }

// Headers are the request headers as they passed the filter (what the router routes on).
func (c *UpstreamCall) Headers() [][2]string { return c.headers }

// Cluster is the try's cluster (see UpstreamRequest.Cluster); empty without
// WithRouteCluster.
func (c *UpstreamCall) Cluster() string { return c.cluster }

// Body reads the request body as it passes the filter: io.EOF at its end, an error wrapping
// ErrUpstreamGone if the exchange gives up first.
func (c *UpstreamCall) Body() io.Reader { return upstreamBody{c} }

// Trailers are the request trailers that passed the filter; valid once Body hit io.EOF.
func (c *UpstreamCall) Trailers() [][2]string {
	vm := c.ex.vm
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return c.body.Trailers()
}

type upstreamBody struct{ c *UpstreamCall }

func (b upstreamBody) Read(p []byte) (int, error) {
	c := b.c
	ex := c.ex
	vm := ex.vm
	for {
		vm.mu.Lock()
		n, st := c.body.Read(p)
		switch st {
		case router.ReadGone:
			vm.mu.Unlock()
			return 0, ErrUpstreamGone
		case router.ReadData:
			ex.signal() // the client may send more now
			vm.mu.Unlock()
			return n, nil
		case router.ReadEOF:
			vm.mu.Unlock()
			return 0, io.EOF
		}
		ch := ex.waitCh()
		vm.mu.Unlock()
		select {
		case <-ch:
		case <-c.ctx.Done():
			return 0, ErrUpstreamGone
		}
	}
}

// deliver runs f on the live exchange with the VM locked, first waiting (flow) while the
// stream holds a buffer limit's worth of response data the client has not taken: Envoy's
// watermarks stop reading the upstream then (readDisable on the upstream connection).
func (c *UpstreamCall) deliver(flow bool, f func(ex *Exchange)) error {
	ex := c.ex
	vm := ex.vm
	for {
		vm.mu.Lock()
		if c.body.Gone() || !ex.live() || !ex.current(c.t) || c.t.up.Done() {
			vm.mu.Unlock()
			return ErrUpstreamGone
		}
		if !flow || ex.responseHeld() < ex.s.BufferLimit() {
			break
		}
		ch := ex.waitCh()
		vm.mu.Unlock()
		select {
		case <-ch:
		case <-c.ctx.Done():
			return ErrUpstreamGone
		}
	}
	n := len(ex.errs)
	f(ex)
	ex.step()
	err := errors.Join(ex.errs[n:]...)
	vm.mu.Unlock()
	return joinErr(err, vm.host.drain())
}

// Respond delivers the response headers (endOfStream: a response without body). The error
// is ErrUpstreamGone, or guest traps in the filter's callbacks.
func (c *UpstreamCall) Respond(headers [][2]string, endOfStream bool) error {
	return c.deliver(false, func(ex *Exchange) {
		c.responded = true
		ex.responseHeaders(c.t, headers, endOfStream)
	})
}

// Data delivers a response body chunk, waiting first while the client has not taken a
// buffer limit's worth of what it was sent (flow control).
func (c *UpstreamCall) Data(chunk []byte, endOfStream bool) error {
	return c.deliver(true, func(ex *Exchange) { ex.responseData(c.t, chunk, endOfStream) })
}

// RespondTrailers delivers the response trailers, which end the response.
func (c *UpstreamCall) RespondTrailers(trailers [][2]string) error {
	return c.deliver(true, func(ex *Exchange) { ex.responseTrailers(c.t, trailers) })
}

// Fail ends the upstream request with a failure. Before Respond: ErrClusterNotFound,
// ErrNoHealthyUpstream or an *UpstreamReset become the router's own replies (NC, UH, UF...),
// any other error a remote connection failure. After Respond: an *UpstreamReset is that
// reset, any other error a terminated connection (UC); the router then resets the client's
// stream (or answers 503 if the filter still holds the response headers).
func (c *UpstreamCall) Fail(err error) error {
	return c.deliver(false, func(ex *Exchange) {
		if !c.responded {
			ex.tryFailed(c.t, err)
			return
		}
		ex.tryFailedAfterHeaders(c.t, err)
	})
}
