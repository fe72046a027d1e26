package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/serve/internal/h1frame"
)

// A client that goes away is recorded as Envoy's connection manager records it. Closing the
// connection, on any protocol, is ConnectionManagerImpl::onEvent(RemoteClose) →
// resetAllStreams: flag DC (DownstreamConnectionTermination) and details
// downstream_remote_disconnect on every stream of the connection. An HTTP/2 client that
// resets one stream (RST_STREAM) and keeps its connection is a codec-level remote reset:
// flag DR (DownstreamRemoteReset). Go's server cancels the request's context in both cases
// without saying which, so serve watches each downstream connection itself: a read or a
// write on it that fails (other than a deadline serve set) means the client's connection is
// gone, and that failure happens before the HTTP/2 server cancels the connection's streams.

// clientConn is a downstream connection that notes when it broke, and hands the server
// only what Envoy's HTTP/1 codec would let through (framing, below).
type clientConn struct {
	net.Conn
	broken atomic.Bool

	framing
}

func (c *clientConn) Read(p []byte) (int, error) {
	n, err := c.framing.read(c.Conn, p)
	c.note(err)
	return n, err
}

func (c *clientConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.note(err)
	return n, err
}

// note marks the connection broken on an error that is not a deadline (serve sets read
// deadlines to stop reading a request body it no longer wants).
func (c *clientConn) note(err error) {
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		c.broken.Store(true)
	}
}

// clientListener wraps each accepted connection in a clientConn.
type clientListener struct{ net.Listener }

func (l clientListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &clientConn{Conn: c}, nil
}

// clientConnKey carries a request's clientConn in its context (http.Server.ConnContext).
type clientConnKey struct{}

// withClientConn is the front end's http.Server.ConnContext.
func withClientConn(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*clientConn); ok {
		return context.WithValue(ctx, clientConnKey{}, cc)
	}
	return ctx
}

// downstreamReset is how the client's going away is recorded: a closed connection is DC with
// downstream_remote_disconnect; an HTTP/2 stream reset on a connection that is still up is
// DR, the stream's details unchanged. A front end that does not watch its connections (a
// Server used as a plain http.Handler) reports every HTTP/2 client as a stream reset.
func downstreamReset(r *http.Request) hostsim.DownstreamReset {
	if r.ProtoMajor != 2 {
		return hostsim.DownstreamDisconnect
	}
	if cc, ok := r.Context().Value(clientConnKey{}).(*clientConn); ok && cc.broken.Load() {
		return hostsim.DownstreamDisconnect
	}
	return hostsim.DownstreamStreamReset
}

// A request Envoy's HTTP/1 codec refuses never reaches its filters: the codec answers it
// itself and closes the connection (codec_impl.cc, ServerConnectionImpl::sendProtocolError;
// ConnectionManagerImpl::handleCodecError). Go's parser is laxer (it drops a
// Content-Length beside Transfer-Encoding: chunked and reads the chunked body, after which
// a second request can follow), so each connection's bytes pass h1frame first, which
// hands Go's server the requests Envoy accepts, a head only once it is complete. For a
// refused request the server reads, in its place, a stand-in request that only this
// connection's refusal token makes recognisable (refusalOf), then the end of the
// connection: the handler answers it as Envoy does (Server.refuse), after the answers to
// the requests before it, and nothing the client sent after it is read.

// refusalHeader carries the connection's refusal token on the stand-in request.
const refusalHeader = "Hostsim-Refusal"

// readBuf is how much of the client's bytes a connection reads at a time.
const readBuf = 32 << 10

// refusal is the request the stand-in stands for.
type refusal struct {
	h1frame.Refusal
	token string
}

// framing is a connection's side of h1frame. Go's server never reads a connection from
// two goroutines at once; refused is read by the handler.
type framing struct {
	fr      h1frame.Framer
	buf     []byte // read from the client
	out     []byte // passed on, out[pos:] not read by the server yet
	pos     int
	end     bool  // after out: io.EOF
	err     error // the client's read error, after out
	refused atomic.Pointer[refusal]
}

func (f *framing) read(src io.Reader, p []byte) (int, error) {
	for f.pos == len(f.out) {
		switch {
		case f.err != nil:
			err := f.err
			f.err = nil
			return 0, err
		case f.end:
			return 0, io.EOF
		case f.fr.Opaque():
			return src.Read(p) // h2c: nothing to follow
		}
		if f.buf == nil {
			f.buf = make([]byte, readBuf)
		}
		n, err := src.Read(f.buf)
		f.out, f.pos = f.out[:0], 0
		if n > 0 {
			var r *h1frame.Refusal
			var stop bool
			f.out, r, stop = f.fr.Feed(f.out, f.buf[:n])
			if r != nil {
				f.standIn(*r)
			}
			f.end = r != nil || stop
		}
		if err != nil && !f.end {
			if f.pos == len(f.out) {
				return 0, err
			}
			f.err = err // hand over what passed first
		}
	}
	n := copy(p, f.out[f.pos:])
	f.pos += n
	return n, nil
}

// standIn queues the stand-in request for r.
func (f *framing) standIn(r h1frame.Refusal) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	ref := &refusal{Refusal: r, token: hex.EncodeToString(b[:])}
	f.refused.Store(ref)
	f.out = append(f.out, "GET / HTTP/1.1\r\nHost: hostsim\r\n"+refusalHeader+": "+ref.token+"\r\n\r\n"...)
}

// refusalOf is the refusal r stands in for, or nil for a request of the client's.
func refusalOf(r *http.Request) *refusal {
	cc, ok := r.Context().Value(clientConnKey{}).(*clientConn)
	if !ok || r.ProtoMajor != 1 {
		return nil
	}
	if ref := cc.refused.Load(); ref != nil && r.Header.Get(refusalHeader) == ref.token {
		return ref
	}
	return nil
}
