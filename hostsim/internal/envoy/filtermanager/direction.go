package filtermanager

// Direction is one side of a stream (the request's decoding or the response's encoding) as
// Envoy's filter manager drives a proxy-wasm filter through it: what reached the filter,
// where its iteration stopped, what the filter manager holds back, and what went on past
// the filter.
type Direction struct {
	// Headers, Body and Trailers are what the filter sees and may change; HasTrailers
	// reports whether there are trailers (received, or added from the last body callback).
	Headers, Trailers [][2]string
	Body              []byte
	HasTrailers       bool

	// HeadersAvail, BodyAvail and TrailersAvail are Envoy's request_headers_ (and
	// response_headers_, body and trailer) pointers in Context: whether the filter may read
	// and change each one now.
	HeadersAvail, BodyAvail, TrailersAvail bool

	// GotHeaders reports that the headers reached the filter; EndStream that the last
	// frame delivered ended the direction.
	GotHeaders bool
	EndStream  bool
	// StoppedAll: the headers callback paused with StopAllIterationAndWatermark.
	StoppedAll bool
	// StoppedHeaders: the headers callback paused with a true StopIteration
	// (allow_on_headers_stop_iteration), so body callbacks still reach the filter.
	StoppedHeaders bool
	// Buffering: a body callback paused with StopIterationAndBuffer.
	Buffering bool
	// StoppedTrailers: the trailers callback paused.
	StoppedTrailers bool
	// Halted: no more callbacks (a local reply, a reset, a failure).
	Halted bool

	// HeldBody, HeldEndStream and HasHeldBody are the data the filter manager holds while
	// the direction is stopped at headers; HeldTrailers and HasHeldTrailers its trailers.
	HeldBody        []byte
	HeldEndStream   bool
	HasHeldBody     bool
	HeldTrailers    [][2]string
	HasHeldTrailers bool

	// ForwardedHeaders, ForwardedBody and ForwardedTrailers are what went on past the
	// filter; Complete that the whole direction did.
	ForwardedHeaders  bool
	ForwardedBody     []byte
	ForwardedTrailers [][2]string
	Complete          bool
}

// Recycle returns an empty Direction that keeps the capacity of d's buffers.
func (d *Direction) Recycle() Direction {
	return Direction{Headers: d.Headers[:0], Trailers: d.Trailers[:0], Body: d.Body[:0],
		HeldBody: d.HeldBody[:0], ForwardedBody: d.ForwardedBody[:0]}
}
