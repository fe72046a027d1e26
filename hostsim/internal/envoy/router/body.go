package router

// RequestBody is the request body the router has passed on to a streaming upstream and the
// upstream has not read yet, with the request's end and trailers: the data Envoy's upstream
// request holds until the upstream connection takes it. The caller locks it.
type RequestBody struct {
	chunks   [][]byte
	queued   int // bytes in chunks
	ended    bool
	trailers [][2]string
	gone     bool
}

// ReadState is what a Read did: copied data, or why it copied none.
type ReadState int

// The read states.
const (
	ReadData ReadState = iota // data was copied
	ReadWait                  // nothing queued yet: wait for more
	ReadEOF                   // the request ended and everything was read
	ReadGone                  // the router abandoned the upstream request
)

// Push queues chunk (kept, not copied) for the upstream; nothing once abandoned.
func (b *RequestBody) Push(chunk []byte) {
	if b.gone || len(chunk) == 0 {
		return
	}
	b.chunks = append(b.chunks, chunk)
	b.queued += len(chunk)
}

// End marks the end of the request, with its trailers (nil: none).
func (b *RequestBody) End(trailers [][2]string) { b.ended, b.trailers = true, trailers }

// Abandon drops what the upstream has not read; later reads find the request gone.
func (b *RequestBody) Abandon() { b.gone, b.chunks, b.queued = true, nil, 0 }

// Gone reports whether the router abandoned the upstream request.
func (b *RequestBody) Gone() bool { return b.gone }

// Queued is the number of bytes the upstream has not read.
func (b *RequestBody) Queued() int { return b.queued }

// Trailers are the request's trailers, once it ended.
func (b *RequestBody) Trailers() [][2]string { return b.trailers }

// Read copies queued data into p, in order. With nothing copied, the state says why: the
// request was abandoned (before anything else), it ended, or more is to come.
func (b *RequestBody) Read(p []byte) (int, ReadState) {
	if b.gone {
		return 0, ReadGone
	}
	if len(b.chunks) > 0 {
		n := copy(p, b.chunks[0])
		if n == len(b.chunks[0]) {
			b.chunks[0] = nil
			b.chunks = b.chunks[1:]
		} else {
			b.chunks[0] = b.chunks[0][n:]
		}
		b.queued -= n
		return n, ReadData
	}
	if b.ended {
		return 0, ReadEOF
	}
	return 0, ReadWait
}
