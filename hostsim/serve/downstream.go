package serve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/spillwayproxy/spillway/hostsim"
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

// clientConn is a downstream connection that notes when it broke.
type clientConn struct {
	net.Conn
	broken atomic.Bool
}

func (c *clientConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
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
