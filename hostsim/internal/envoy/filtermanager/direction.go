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
	// ReleasedBuffer: the last body that went on was the filter manager's own buffer,
	// released by a continue after the filter buffered it (StopIterationAndBuffer then
	// ActiveStreamFilterBase::commonContinue → doData): the next filter gets the connection
	// manager's buffer itself as its data, which the router's retry buffer check counts
	// twice (envoyproxy/envoy#30613). Whoever takes ForwardedBody clears it.
	ReleasedBuffer bool
}

// Recycle returns an empty Direction that keeps the capacity of d's buffers.
func (d *Direction) Recycle() Direction {
	return Direction{Headers: d.Headers[:0], Trailers: d.Trailers[:0], Body: d.Body[:0],
		HeldBody: d.HeldBody[:0], ForwardedBody: d.ForwardedBody[:0]}
}

// Filter is what a direction's transitions need from the stream around them: the filter's
// body and trailers callbacks, for what the filter manager held back while the direction
// was stopped at headers, and word that a transition completed the direction.
type Filter interface {
	// Body delivers a chunk to the filter as decodeData/encodeData does, with the
	// stream's rules around the callback (buffer limit, failure policy).
	Body(d *Direction, chunk []byte, eos bool) error
	// Trailers delivers trailers to the filter as decodeTrailers/encodeTrailers does.
	Trailers(d *Direction, trailers [][2]string) error
	// Completed hears that d went on past the filter in full.
	Completed(d *Direction)
}

// Finish marks the direction complete, with trailers the last body callback added; f
// hears of it the first time only.
func (d *Direction) Finish(f Filter) {
	if d.Complete {
		return
	}
	d.Complete = true
	if d.HasTrailers && d.ForwardedTrailers == nil { // added from the last body callback
		d.ForwardedTrailers = d.Trailers
	}
	f.Completed(d)
}

// ForwardHeaders lets the headers go on past the filter (and the direction, if they
// ended it).
func (d *Direction) ForwardHeaders(f Filter) {
	d.ForwardedHeaders = true
	if d.EndStream {
		d.Finish(f)
	}
}

// ForwardTrailers lets the buffered body and the trailers go on, which completes the
// direction.
func (d *Direction) ForwardTrailers(f Filter) {
	if d.Buffering {
		d.ForwardedBody = append(d.ForwardedBody, d.Body...)
		d.Buffering = false
	}
	d.ForwardedTrailers = d.Trailers
	d.Finish(f)
}

// ForwardBody lets a chunk go on without the filter seeing it (a bypassed filter).
func (d *Direction) ForwardBody(chunk []byte, eos bool, f Filter) {
	d.ForwardedBody = append(d.ForwardedBody, chunk...)
	if eos {
		d.Finish(f)
	}
}

// releaseBuffer lets the buffered body go on (and the direction, if it ended).
func (d *Direction) releaseBuffer(f Filter) {
	d.Buffering = false
	d.ReleasedBuffer = d.ReleasedBuffer || len(d.Body) > 0
	d.ForwardedBody = append(d.ForwardedBody, d.Body...)
	if d.EndStream {
		d.Finish(f)
	}
}

// AfterHeaders applies a headers verdict; it reports whether the direction paused.
func (d *Direction) AfterHeaders(v HeadersVerdict, f Filter) (paused bool) {
	switch v {
	case HeadersStopIteration:
		// Envoy ≥ 1.35 with allow_on_headers_stop_iteration: true StopIteration, body
		// callbacks still reach the filter.
		d.StoppedHeaders = true
		return true
	case HeadersStopAll:
		d.StoppedAll = true
		return true
	default:
		d.HeadersAvail = false
		d.ForwardHeaders(f)
		return false
	}
}

// Hold keeps a chunk that arrives while the direction is stopped at headers: the filter
// manager buffers it without calling the filter (FilterManager::handleDataIfStopAll,
// source/common/http/filter_manager.cc). No buffer limit applies here: a
// StopAllIterationAndWatermark filter is streaming, so the limit is a watermark that stops
// reading (ActiveStreamDecoderFilter::requestDataTooLarge, ActiveStreamEncoderFilter::
// responseDataTooLarge), never a 413 or 500.
func (d *Direction) Hold(chunk []byte, eos bool) {
	d.HeldBody = append(d.HeldBody, chunk...)
	d.HeldEndStream = d.HeldEndStream || eos
	d.HasHeldBody = true
}

// HoldTrailers keeps trailers that arrive while the direction is stopped at headers.
func (d *Direction) HoldTrailers(trailers [][2]string) {
	d.HeldTrailers, d.HasHeldTrailers = trailers, true
}

// Receive puts a chunk in the body the filter's callback sees: added to what it buffers,
// or in place of the last chunk.
func (d *Direction) Receive(chunk []byte) {
	if d.Buffering {
		d.Body = append(d.Body, chunk...)
	} else {
		d.Body = append(d.Body[:0], chunk...)
	}
}

// AfterData applies a body verdict for a chunk that ended the direction or not; it
// reports whether the direction paused.
func (d *Direction) AfterData(v DataVerdict, eos bool, f Filter) (paused bool) {
	switch v {
	case DataContinue:
		if d.StoppedHeaders { // a Continue from data resumes the headers too
			d.StoppedHeaders, d.HeadersAvail, d.ForwardedHeaders = false, false, true
		}
		d.BodyAvail = false
		d.ForwardedBody = append(d.ForwardedBody, d.Body...)
		d.Buffering = false
		if eos {
			d.Finish(f)
		}
		return false
	case DataStopNoBuffer: // nobody keeps the data
		d.BodyAvail = false
		d.Body = d.Body[:0]
		d.Buffering = false
		return true
	default: // DataStopAndBuffer: keep accumulating
		d.Buffering = true
		return true
	}
}

// AfterTrailers applies a trailers verdict (Trailers' answer); it reports whether the
// direction paused.
func (d *Direction) AfterTrailers(goOn bool, f Filter) (paused bool) {
	if !goOn {
		d.StoppedTrailers = true
		return true
	}
	if d.StoppedHeaders {
		d.StoppedHeaders, d.HeadersAvail, d.ForwardedHeaders = false, false, true
	}
	d.TrailersAvail = false
	d.ForwardTrailers(f)
	return false
}

// Unavailable takes the headers, body and trailers from the filter (Context::continueStream
// clears the pointers; so does a reset stream).
func (d *Direction) Unavailable() {
	d.HeadersAvail, d.BodyAvail, d.TrailersAvail = false, false, false
}

// Resumable reports whether a continue has anything to resume: headers reached the filter
// and the direction neither halted nor completed.
func (d *Direction) Resumable() bool { return !d.Halted && !d.Complete && d.GotHeaders }

// Resume is Envoy's continueDecoding/continueEncoding after proxy_continue_stream, for a
// Resumable direction. A direction stopped all (a headers Pause without
// allow_on_headers_stop_iteration) resumes from this filter, as ActiveStreamFilterBase::
// commonContinue does for a StopAll filter (iterate_from_current_filter_,
// source/common/http/filter_manager.cc): the headers go on, then the data and trailers the
// filter manager held reach this filter's own callbacks through f, the data in one
// cumulative body callback. Otherwise what the filter stopped goes on past it.
func (d *Direction) Resume(f Filter) error {
	if !d.Resumable() {
		return nil
	}
	switch {
	case d.StoppedAll:
		d.StoppedAll = false
		d.ForwardHeaders(f)
		if d.HasHeldBody {
			chunk, eos := d.HeldBody, d.HeldEndStream
			d.HeldBody, d.HeldEndStream, d.HasHeldBody = nil, false, false
			if err := f.Body(d, chunk, eos); err != nil {
				return err
			}
		}
		if d.HasHeldTrailers && !d.StoppedAll {
			tr := d.HeldTrailers
			d.HeldTrailers, d.HasHeldTrailers = nil, false
			if err := f.Trailers(d, tr); err != nil {
				return err
			}
		}
	case d.StoppedHeaders:
		d.StoppedHeaders = false
		d.ForwardedHeaders = true
		switch {
		case d.StoppedTrailers:
			d.StoppedTrailers = false
			d.ForwardTrailers(f)
		case d.Buffering:
			d.releaseBuffer(f)
		case d.EndStream:
			d.Finish(f)
		}
	case d.StoppedTrailers:
		d.StoppedTrailers = false
		d.ForwardTrailers(f)
	case d.Buffering:
		d.releaseBuffer(f)
	}
	return nil
}

// Bypass is FAIL_OPEN for a direction whose filter failed: what the filter stopped or the
// filter manager held goes on past it, headers, body and trailers, as if the filter were
// not there.
func (d *Direction) Bypass(f Filter) {
	if !d.StoppedAll && !d.StoppedTrailers && !d.Buffering {
		if d.GotHeaders && !d.ForwardedHeaders {
			d.ForwardHeaders(f)
		}
		return
	}
	d.StoppedAll, d.StoppedTrailers = false, false
	if !d.ForwardedHeaders && d.GotHeaders {
		d.ForwardedHeaders = true
	}
	if d.HasHeldBody {
		d.Body = append(d.Body, d.HeldBody...)
		d.HasHeldBody = false
		d.Buffering = true
	}
	if d.HasHeldTrailers {
		d.Trailers, d.HasTrailers, d.HasHeldTrailers = d.HeldTrailers, true, false
	}
	if d.Buffering {
		d.ForwardedBody = append(d.ForwardedBody, d.Body...)
		d.Buffering = false
	}
	if d.HasTrailers {
		d.ForwardedTrailers = d.Trailers
	}
	if d.EndStream || d.HasTrailers {
		d.Finish(f)
	}
}
