// Package h1frame follows the HTTP/1.1 framing of what a client sends on one connection
// and refuses, before anything of a request reaches the server behind it, what Envoy's
// HTTP/1 codec refuses (source/common/http/http1/codec_impl.cc and balsa_parser.cc): it
// lets a net/http front end, whose parser is laxer (it drops a Content-Length beside
// Transfer-Encoding: chunked, RFC 9112 §6.3), answer those requests as Envoy does. It
// imports nothing of the module.
package h1frame

import (
	"bytes"
	"strconv"
)

// Refusal is a request Envoy's codec answers itself and closes the connection after
// (ConnectionManagerImpl::handleCodecError): the local reply's status and the stream's
// response code details (ServerConnectionImpl::sendProtocolError).
type Refusal struct {
	Status  int
	Details string
}

// The response code details of the refusals (Http1ResponseCodeDetailValues in
// codec_impl.cc; StreamInfo::ResponseCodeDetails::LowVersion).
const (
	DetailsChunkedContentLength    = "http1.content_length_and_chunked_not_allowed"
	DetailsCodecError              = "http1.codec_error"
	DetailsInvalidTransferEncoding = "http1.invalid_transfer_encoding"
	DetailsInvalidCharacters       = "http1.invalid_characters"
	DetailsHeadersTooLarge         = "http1.headers_too_large"
	DetailsLowVersion              = "low_version"
)

// MaxHeadBytes is the most a request head (request line and header lines) may take: Envoy's
// max_request_headers_kb default, 60 KiB, which the balsa parser applies to the head's raw
// bytes (ConnectionImpl::ConnectionImpl passes max_headers_kb * 1024 as BalsaFrame's
// max_header_length; "headers size exceeds limit" is 431 http1.headers_too_large in
// ConnectionImpl::dispatchSlice). It also bounds what a Framer holds back.
const MaxHeadBytes = 60 << 10

// maxChunkLine bounds a chunk-size line, as net/http does (internal/chunked.go,
// maxLineLength): past it net/http fails the body.
const maxChunkLine = 4096

// preface is the HTTP/2 connection preface: a connection that starts with it is h2c
// (RFC 9113 §3.4), which has no Transfer-Encoding, and the Framer lets it through as is.
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

type state int

const (
	stStart     state = iota // nothing yet: the HTTP/2 preface, or a request head
	stHead                   // a request head, held back until it is complete
	stBody                   // remain bytes of a content-length body
	stChunkSize              // a chunk-size line (in line)
	stChunkData              // remain bytes of a chunk's data
	stChunkCRLF              // the CRLF after a chunk's data (crlf of it seen)
	stTrailers               // the trailer section after the last chunk (in line)
	stOpaque                 // h2c: everything passes
	stStopped                // a refusal, or a body net/http fails too: nothing more passes
)

// Framer follows one connection. The zero value is ready for its first byte.
type Framer struct {
	st     state
	head   []byte // the request head so far (stStart, stHead)
	line   []byte // the chunk-size or trailer line so far
	trail  int    // trailer bytes so far
	remain uint64 // body or chunk bytes left
	crlf   int    // bytes of the CRLF after a chunk seen
	// Requests counts the request heads passed on.
	Requests int
}

// Opaque reports that the connection is h2c: everything passes as is from now on.
func (f *Framer) Opaque() bool { return f.st == stOpaque }

// Feed takes the next bytes the client sent and appends to out what the server may read
// now: bytes of requests whose framing Envoy accepts, a head once it is complete. A
// refusal, or stop (a body net/http fails on as well, or a request serve does not follow,
// such as a CONNECT tunnel), ends the connection: nothing after out may reach the server,
// and Feed must not be called again.
func (f *Framer) Feed(out, p []byte) (_ []byte, r *Refusal, stop bool) {
	for len(p) > 0 {
		switch f.st {
		case stOpaque:
			return append(out, p...), nil, false
		case stStopped:
			return out, nil, true
		case stStart:
			k := 0 // how far p goes on with the preface
			for k < len(p) && len(f.head)+k < len(preface) && p[k] == preface[len(f.head)+k] {
				k++
			}
			if len(f.head)+k == len(preface) {
				out = append(append(out, f.head...), p[:k]...)
				f.head, p, f.st = nil, p[k:], stOpaque
				continue
			}
			if k == len(p) {
				f.head = append(f.head, p...) // a preface so far: wait for more
				return out, nil, false
			}
			// Not HTTP/2: what came is a request's, read line by line from the start.
			p = append(append([]byte(nil), f.head...), p...)
			f.head, f.st = f.head[:0], stHead
		case stHead:
			var done bool
			n := len(p)
			if i := bytes.IndexByte(p, '\n'); i >= 0 {
				n = i + 1
			}
			out, r, done = f.headBytes(out, p[:n])
			p = p[n:]
			if r != nil || done {
				return out, r, done
			}
		case stBody:
			n := uint64(len(p))
			if n > f.remain {
				n = f.remain
			}
			out, p = append(out, p[:n]...), p[n:]
			if f.remain -= n; f.remain == 0 {
				f.st = stHead
			}
		case stChunkSize, stTrailers:
			n := len(p)
			if i := bytes.IndexByte(p, '\n'); i >= 0 {
				n = i + 1
			}
			f.line = append(f.line, p[:n]...)
			out, p = append(out, p[:n]...), p[n:]
			if f.st == stChunkSize {
				if !f.chunkSize() {
					return f.stop(out)
				}
			} else if !f.trailer() {
				return f.stop(out)
			}
		case stChunkData:
			n := uint64(len(p))
			if n > f.remain {
				n = f.remain
			}
			out, p = append(out, p[:n]...), p[n:]
			if f.remain -= n; f.remain == 0 {
				f.st, f.crlf = stChunkCRLF, 0
			}
		case stChunkCRLF:
			// net/http wants exactly CRLF after a chunk's data ("malformed chunked
			// encoding"); Envoy's parser refuses the rest as HPE_INVALID_CHUNK_SIZE.
			if p[0] != "\r\n"[f.crlf] {
				return f.stop(out)
			}
			out, p = append(out, p[0]), p[1:]
			if f.crlf++; f.crlf == 2 {
				f.st = stChunkSize
			}
		}
	}
	return out, nil, f.st == stStopped
}

// stop passes what came before a body net/http fails on too (a malformed chunk): the server's
// own body reader then fails and closes the connection, and nothing after is read as a
// request. Envoy answers such a body 400 codec_error if no response started.
func (f *Framer) stop(out []byte) ([]byte, *Refusal, bool) {
	f.st, f.head, f.line = stStopped, nil, nil
	return out, nil, true
}

// refuse ends the connection with r: the head is never passed on.
func (f *Framer) refuse(out []byte, status int, details string) ([]byte, *Refusal, bool) {
	f.st, f.head, f.line = stStopped, nil, nil
	return out, &Refusal{Status: status, Details: details}, false
}

// headBytes adds b, which holds at most one '\n' at its end, to the head, and judges the
// head once its empty line came.
func (f *Framer) headBytes(out, b []byte) ([]byte, *Refusal, bool) {
	f.head = append(f.head, b...)
	if len(f.head) > MaxHeadBytes {
		return f.refuse(out, 431, DetailsHeadersTooLarge)
	}
	// The head ends with an empty line after the request line: "\n\n" or "\n\r\n".
	h := f.head
	if !(bytes.HasSuffix(h, []byte("\n\n")) || bytes.HasSuffix(h, []byte("\n\r\n"))) {
		if len(h) > 0 && (h[0] == '\n' || bytes.HasPrefix(h, []byte("\r\n"))) {
			// No request line: net/http answers 400 ("malformed HTTP request").
			return f.passAndStop(out)
		}
		return out, nil, false
	}
	return f.judge(out)
}

// passAndStop hands on a head net/http refuses itself (it answers 400 and closes), and
// nothing after it.
func (f *Framer) passAndStop(out []byte) ([]byte, *Refusal, bool) {
	out = append(out, f.head...)
	f.st, f.head, f.line = stStopped, nil, nil
	return out, nil, true
}

// judge decides on a complete head, in the order Envoy's codec does: the balsa parser's
// checks of each header line (BalsaFrame's, with the policy BalsaParser sets: a header
// name must be a token and have its colon, at most one Content-Length,
// disallow_multiple_content_length; the codec's headerValueIsValid on each value), then,
// once the headers are complete (ConnectionImpl::onHeadersCompleteImpl), Transfer-Encoding
// with Content-Length (400, as allow_chunked_length is off unless configured), a
// Transfer-Encoding other than chunked (501), and a version other than HTTP/1.1 (426,
// ServerConnectionImpl::checkProtocolVersion: accept_http_10 is off by default).
func (f *Framer) judge(out []byte) ([]byte, *Refusal, bool) {
	reqLine, rest, _ := cutLine(f.head)
	method, target, proto, ok := requestLine(reqLine)
	if !ok {
		return f.passAndStop(out) // net/http answers 400 ("malformed HTTP request")
	}
	var cl, te []byte
	nCL, nTE := 0, 0
	var last *[]byte // the previous header's value, for an obs-fold continuation
	first := true
	for {
		line, more, ok := cutLine(rest)
		if !ok || len(line) == 0 {
			break
		}
		rest = more
		if line[0] == ' ' || line[0] == '\t' {
			if first {
				// A continuation with nothing to continue: balsa and net/http refuse it.
				return f.refuse(out, 400, DetailsCodecError)
			}
			// obs-fold (RFC 9112 §5.2): BalsaParser allows it
			// (disallow_header_continuation_lines = false), and net/http joins the lines
			// with a space, as here.
			if last != nil {
				*last = append(append(*last, ' '), trimOWS(line)...)
			}
			if bad := invalidValue(line); bad {
				return f.refuse(out, 400, DetailsInvalidCharacters)
			}
			continue
		}
		first = false
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !isToken(name) {
			// No colon (require_header_colon), or a name that is not a token (balsa's
			// HPE_INVALID_HEADER_TOKEN; net/http keeps "Content-Length :" as another
			// header, which is why this matters).
			return f.refuse(out, 400, DetailsCodecError)
		}
		if invalidValue(value) {
			// ConnectionImpl::onHeaderValueImpl, HeaderUtility::headerValueIsValid.
			return f.refuse(out, 400, DetailsInvalidCharacters)
		}
		last = nil
		switch {
		case asciiEqualFold(name, "content-length"):
			if nCL++; nCL > 1 {
				// BalsaFrame's MULTIPLE_CONTENT_LENGTH_KEYS, identical values or not:
				// "HPE_UNEXPECTED_CONTENT_LENGTH", http1.codec_error.
				return f.refuse(out, 400, DetailsCodecError)
			}
			cl = append([]byte(nil), trimOWS(value)...)
			last = &cl
		case asciiEqualFold(name, "transfer-encoding"):
			// Envoy's header map joins repeated lines with ",", which is then not
			// "chunked".
			if nTE > 0 {
				te = append(te, ',')
			}
			nTE++
			te = append(te, trimOWS(value)...)
			last = &te
		}
	}
	length, clOK := contentLength(cl)
	switch {
	case nCL == 1 && nTE == 0 && !clOK:
		// BalsaFrame: UNPARSABLE_CONTENT_LENGTH or CONTENT_LENGTH_OVERFLOW.
		return f.refuse(out, 400, DetailsCodecError)
	case nTE > 0 && nCL > 0:
		return f.refuse(out, 400, DetailsChunkedContentLength)
	case nTE > 0 && !asciiEqualFold(te, "chunked"):
		return f.refuse(out, 501, DetailsInvalidTransferEncoding)
	case proto != "HTTP/1.1":
		if !validVersion(proto) {
			return f.passAndStop(out) // net/http answers 400 ("malformed HTTP version")
		}
		return f.refuse(out, 426, DetailsLowVersion)
	}
	out = append(out, f.head...)
	f.head = f.head[:0]
	f.Requests++
	switch {
	case method == "CONNECT" || method == "PRI" && target == "*":
		// A tunnel (or a late HTTP/2 preface) is not HTTP/1.1 framing: serve follows it no
		// further, so the server reads nothing after this head.
		f.st = stStopped
		return out, nil, true
	case nTE > 0:
		f.st, f.line = stChunkSize, f.line[:0]
	case length > 0:
		f.st, f.remain = stBody, length
	default:
		f.st = stHead
	}
	return out, nil, false
}

// chunkSize reads a complete chunk-size line as net/http's chunked reader does
// (internal/chunked.go, readChunkLine and beginChunk): CRLF-terminated, no other CR,
// shorter than maxChunkLine, extensions after ';' and trailing whitespace ignored, 1 to 16
// hex digits. A line it is not sure of stops the framer, which net/http fails on too.
func (f *Framer) chunkSize() bool {
	l := f.line
	if l[len(l)-1] != '\n' {
		return len(l) < maxChunkLine // not complete yet
	}
	if len(l) < 2 || l[len(l)-2] != '\r' || bytes.IndexByte(l, '\r') != len(l)-2 || len(l)-2 >= maxChunkLine {
		return false
	}
	l = l[:len(l)-2]
	l, _, _ = bytes.Cut(l, []byte(";"))
	l = bytes.TrimRight(l, " \t")
	if len(l) == 0 || len(l) > 16 {
		return false
	}
	var n uint64
	for _, c := range l {
		d, ok := hexDigit(c)
		if !ok {
			return false
		}
		n = n<<4 | uint64(d)
	}
	f.line = f.line[:0]
	if n == 0 {
		f.st, f.trail = stTrailers, 0
		return true
	}
	f.st, f.remain = stChunkData, n
	return true
}

// trailer reads the trailer section after the last chunk: lines up to an empty one, within
// MaxHeadBytes (Envoy's limit applies to trailers too).
func (f *Framer) trailer() bool {
	l := f.line
	f.trail += len(l)
	if f.trail > MaxHeadBytes {
		return false
	}
	if l[len(l)-1] != '\n' {
		return true
	}
	f.line = f.line[:0]
	if len(l) == 1 || len(l) == 2 && l[0] == '\r' {
		f.st = stHead // the empty line: the request is complete
	}
	return true
}

// cutLine splits b at its first '\n', dropping the line's "\r\n" or "\n" (ok false: no
// complete line).
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, b, false
	}
	line, rest = b[:i], b[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest, true
}

// requestLine splits a request line as net/http does (request.go, parseRequestLine: at
// the first two spaces), with a method that is a token.
func requestLine(l []byte) (method, target, proto string, ok bool) {
	m, rest, ok1 := bytes.Cut(l, []byte(" "))
	t, p, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || !isToken(m) {
		return "", "", "", false
	}
	return string(m), string(t), string(p), true
}

// validVersion is "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3).
func validVersion(p string) bool {
	return len(p) == 8 && p[:5] == "HTTP/" && isDigit(p[5]) && p[6] == '.' && isDigit(p[7])
}

// contentLength parses a Content-Length value: digits only, as both net/http
// (strconv.ParseUint, 63 bits) and Envoy's parser (which refuses anything else as
// unparsable) accept.
func contentLength(v []byte) (uint64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(string(v), 10, 63)
	return n, err == nil
}

// invalidValue: a NUL or a CR in a header value (HeaderUtility::headerValueIsValid; the
// line's own CRLF is gone).
func invalidValue(v []byte) bool { return bytes.IndexByte(v, 0) >= 0 || bytes.IndexByte(v, '\r') >= 0 }

func trimOWS(b []byte) []byte { return bytes.Trim(b, " \t") }

// isToken: RFC 9110 §5.6.2 tchar, the characters balsa_parser.cc allows in a header name
// (kValidCharacters) and net/http in a method.
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !isTchar(c) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', isDigit(c):
		return true
	}
	return bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func hexDigit(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// asciiEqualFold compares b with the lower-case ASCII s, ignoring ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
