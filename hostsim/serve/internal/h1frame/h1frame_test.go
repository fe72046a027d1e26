package h1frame

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// feedAll feeds in in pieces of size (0: at once) and returns what passed, the refusal and
// whether the framer stopped.
func feedAll(in string, size int) (string, *Refusal, bool) {
	var f Framer
	var out []byte
	b := []byte(in)
	for len(b) > 0 {
		n := len(b)
		if size > 0 {
			n = min(size, n)
		}
		var r *Refusal
		var stop bool
		out, r, stop = f.Feed(out, b[:n])
		if r != nil || stop {
			return string(out), r, stop
		}
		b = b[n:]
	}
	return string(out), nil, false
}

const (
	get   = "GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n"
	post5 = "POST /v1/chat HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
	chunk = "POST /v1/chat HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"
)

// What Envoy's HTTP/1 codec refuses before a request reaches the filters, and what it
// lets through. The oracle is Envoy's source: codec_impl.cc
// (ConnectionImpl::onHeadersCompleteImpl, ServerConnectionImpl::checkProtocolVersion,
// onHeaderValueImpl, dispatchSlice) with the balsa parser's policy (balsa_parser.cc), and
// its tests (test/common/http/http1/codec_impl_test.cc: ChunkedContentLength rejects
// transfer-encoding: chunked with content-length as 400
// http1.content_length_and_chunked_not_allowed, IdentityEncodingNoChunked,
// UnsupportedEncoding and IdentityAndChunkedBody as "unsupported transfer encoding").
func TestFraming(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		pass    string // what reaches the server
		status  int    // the refusal's status, 0 for none
		details string // the refusal's details
		stop    bool   // nothing more passes, without a refusal of serve's
	}{
		{"one GET", get, get, 0, "", false},
		{"pipelined: content-length, chunked and no body", post5 + chunk + get, post5 + chunk + get, 0, "", false},
		{"bare LF line ends in the head", "GET / HTTP/1.1\nHost: a\n\n", "GET / HTTP/1.1\nHost: a\n\n", 0, "", false},
		{"content-length 0", "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n" + get, "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n" + get, 0, "", false},
		{"chunked in another case", strings.Replace(chunk, "chunked", "Chunked", 1), strings.Replace(chunk, "chunked", "Chunked", 1), 0, "", false},
		{"h2c preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12", 0, "", false},

		// The smuggling shape: Content-Length and chunked, a second request after the last
		// chunk. Nothing of it reaches the server.
		{"content-length with chunked", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get,
			"", 400, DetailsChunkedContentLength, false},
		{"chunked with content-length 0, after a good request", get + "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n",
			get, 400, DetailsChunkedContentLength, false},
		{"content-length with another coding", "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: gzip\r\n\r\nhello",
			"", 400, DetailsChunkedContentLength, false},
		// Duplicate and conflicting Content-Length: balsa's disallow_multiple_content_length.
		{"duplicate content-length", "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", "", 400, DetailsCodecError, false},
		{"conflicting content-length", "POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\nhello!", "", 400, DetailsCodecError, false},
		{"content-length list", "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\nhello", "", 400, DetailsCodecError, false},
		{"signed content-length", "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello", "", 400, DetailsCodecError, false},
		{"empty content-length", "POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", "", 400, DetailsCodecError, false},
		{"content-length past 63 bits", "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", "", 400, DetailsCodecError, false},
		// A name net/http would take for another header: "Content-Length :" smuggles a body.
		{"space before the colon", "POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\nhello", "", 400, DetailsCodecError, false},
		{"no colon", "GET / HTTP/1.1\r\nHost a\r\n\r\n", "", 400, DetailsCodecError, false},
		{"NUL in a value", "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", "", 400, DetailsInvalidCharacters, false},
		{"bare CR in a value", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", "", 400, DetailsInvalidCharacters, false},
		// Transfer-Encoding other than chunked: 501.
		{"gzip", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "", 501, DetailsInvalidTransferEncoding, false},
		{"identity", "POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", "", 501, DetailsInvalidTransferEncoding, false},
		{"gzip, chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "", 501, DetailsInvalidTransferEncoding, false},
		{"chunked twice", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "", 501, DetailsInvalidTransferEncoding, false},
		{"chunked folded onto another line", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n x\r\n\r\n0\r\n\r\n", "", 501, DetailsInvalidTransferEncoding, false},
		// HTTP/1.0 (accept_http_10 off): 426, after the framing checks.
		{"HTTP/1.0", "GET / HTTP/1.0\r\n\r\n", "", 426, DetailsLowVersion, false},
		{"HTTP/1.0 with chunked and content-length", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", "", 400, DetailsChunkedContentLength, false},
		{"head too large", "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", MaxHeadBytes) + "\r\n\r\n", "", 431, DetailsHeadersTooLarge, false},

		// What net/http refuses itself (400 and a closed connection) passes, and nothing after.
		{"no request line", "\r\n" + get, "\r\n", 0, "", true},
		{"malformed request line", "GET /\r\n\r\n" + get, "GET /\r\n\r\n", 0, "", true},
		{"malformed version", "GET / HTTP/x\r\n\r\n" + get, "GET / HTTP/x\r\n\r\n", 0, "", true},
		// A chunked body net/http fails on: it gets what came before, then nothing.
		{"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + get,
			"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "", true},
		{"chunk size with a bare LF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
			"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\n", 0, "", true},
		{"chunk data too long", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
			"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab", 0, "", true},
		{"CONNECT", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n\x16\x03", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{0, 1, 7} { // at once, byte by byte, and in odd pieces
				pass, r, stop := feedAll(tc.in, size)
				if pass != tc.pass {
					t.Fatalf("size %d: passed %q, want %q", size, pass, tc.pass)
				}
				if (r != nil) != (tc.status != 0) || r != nil && (r.Status != tc.status || r.Details != tc.details) {
					t.Fatalf("size %d: refusal %+v, want %d %s", size, r, tc.status, tc.details)
				}
				if stop != tc.stop {
					t.Fatalf("size %d: stop %v, want %v", size, stop, tc.stop)
				}
			}
		})
	}
}

// The framer and net/http agree on where requests end: whatever the input, net/http reads
// from what the framer passes no request the framer did not pass a head for, and the
// framer's heads in order. A disagreement would let bytes the framer took for a body reach
// the server as a request it never checked.
func FuzzFramerAgreesWithNetHTTP(f *testing.F) {
	for _, s := range []string{get, post5 + chunk + get, "POST / HTTP/1.1\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get,
		"POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\nhello" + get, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + get,
		"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n" + get, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		// Byte by byte, so that the Feed that passes a head appends exactly that head.
		var fr Framer
		var out []byte
		var lines []string // the request lines of the heads the framer passed
		for i := 0; i < len(in); i++ {
			before, n := len(out), fr.Requests
			var r *Refusal
			var stop bool
			out, r, stop = fr.Feed(out, []byte{in[i]})
			if fr.Requests > n {
				line, _, _ := cutLine(out[before:])
				lines = append(lines, string(line))
			}
			if r != nil || stop {
				break
			}
		}
		if bytes.HasPrefix(out, []byte(preface)) {
			return // h2c: not HTTP/1.1
		}
		br := bufio.NewReader(bytes.NewReader(out))
		for n := 0; ; n++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if n >= len(lines) {
				t.Fatalf("net/http read request %d (%s %s) from %q; the framer passed %d heads", n+1, req.Method, req.RequestURI, out, len(lines))
			}
			if got := req.Method + " " + req.RequestURI + " " + req.Proto; got != lines[n] {
				t.Fatalf("request %d: net/http read %q where the framer passed %q (from %q)", n+1, got, lines[n], out)
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
		}
	})
}
