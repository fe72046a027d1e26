package serve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// rawExchange writes payload on a fresh connection to addr as a client that does not care
// about framing would, and reads every response until the connection closes or goes quiet
// for quiet (closed reports which).
func rawExchange(t *testing.T, addr, payload string, quiet time.Duration) (resps []*http.Response, bodies []string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(quiet))
		if _, err := br.Peek(1); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return resps, bodies, false
			}
			return resps, bodies, true // EOF (or a reset): the server closed it
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", len(resps)+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("response %d body: %v", len(resps)+1, err)
		}
		resps, bodies = append(resps, resp), append(bodies, string(b))
	}
}

const smuggled = "GET /v1/models HTTP/1.1\r\nHost: smuggled\r\n\r\n"

// Content-Length beside Transfer-Encoding: chunked, and a second request after the last
// chunk. Go's parser would drop the Content-Length, read the empty chunked body and then
// serve the second request; Envoy refuses the first with 400
// http1.content_length_and_chunked_not_allowed (codec_impl.cc,
// ConnectionImpl::onHeadersCompleteImpl, allow_chunked_length off) and closes the
// connection, so the second is never processed. Nothing reaches the filter or a provider.
func TestSmuggledRequestIsRefused(t *testing.T) {
	d := startDemo(t, nil)
	payload := "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n", len("0\r\n\r\n"+smuggled)) +
		"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled
	resps, bodies, closed := rawExchange(t, d.Addr, payload, 3*time.Second)
	if len(resps) != 1 || resps[0].StatusCode != 400 || bodies[0] != "Bad Request" ||
		!resps[0].Close || resps[0].Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("got %d responses (%v %q); want one 400 \"Bad Request\" with connection: close", len(resps), statuses(resps), bodies)
	}
	if !closed {
		t.Fatal("the connection stayed open after the refusal")
	}
	line := d.access.await("details=http1.content_length_and_chunked_not_allowed", 1)[0]
	if !strings.Contains(line, " - - 400 ") || !strings.Contains(line, "flags=DPE") {
		t.Errorf("access line %q, want no method or path, 400, DPE", line)
	}
	if got := d.access.lines("/v1/models"); len(got) != 0 {
		t.Errorf("the smuggled request was processed: %q", got)
	}
	for name, f := range d.Fakes {
		if n := len(f.Requests()); n != 0 {
			t.Errorf("%s got %d requests", name, n)
		}
	}
}

// What else Envoy's HTTP/1 codec refuses, and how (the oracle is Envoy's source, each case
// citing where; h1frame's tests hold the full table): the status and its text as the body,
// connection: close on a 400 only (ActiveStream::onLocalReply), the connection closed
// after it in every case (handleCodecError), and the stream's details in the access log.
func TestFramingRefusals(t *testing.T) {
	d := startDemo(t, nil)
	post := "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\n"
	for _, tc := range []struct {
		name    string
		payload string
		status  int
		details string
	}{
		// balsa_parser.cc sets disallow_multiple_content_length: MULTIPLE_CONTENT_LENGTH_KEYS,
		// "HPE_UNEXPECTED_CONTENT_LENGTH", http1.codec_error (ConnectionImpl::dispatchSlice).
		{"duplicate content-length", post + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}" + smuggled, 400, "http1.codec_error"},
		{"conflicting content-length", post + "Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}" + smuggled, 400, "http1.codec_error"},
		// Not a token: balsa's HPE_INVALID_HEADER_TOKEN; Go would keep it as another header
		// and read no body, so the body would be taken for a request.
		{"content-length with a space before the colon", post + "Content-Length : 41\r\n\r\n" + smuggled, 400, "http1.codec_error"},
		// onHeadersCompleteImpl: a Transfer-Encoding other than chunked is 501.
		{"transfer-encoding gzip", post + "Transfer-Encoding: gzip\r\n\r\n" + smuggled, 501, "http1.invalid_transfer_encoding"},
		{"transfer-encoding chunked twice", post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 501, "http1.invalid_transfer_encoding"},
		// ServerConnectionImpl::checkProtocolVersion: accept_http_10 is off by default.
		{"HTTP/1.0", "GET /v1/models HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + smuggled, 426, "low_version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resps, bodies, closed := rawExchange(t, d.Addr, tc.payload, 3*time.Second)
			if len(resps) != 1 || resps[0].StatusCode != tc.status || bodies[0] != http.StatusText(tc.status) {
				t.Fatalf("got %v %q; want one %d", statuses(resps), bodies, tc.status)
			}
			// http.ReadResponse takes "connection: close" out of the headers into Close.
			if resps[0].Close != (tc.status == 400) {
				t.Errorf("connection: close %v, want it on a 400 only", resps[0].Close)
			}
			if !closed {
				t.Error("the connection stayed open after the refusal")
			}
			d.access.await("details="+tc.details, 1)
		})
	}
	if got := d.access.lines("/v1/models"); len(got) != 0 {
		t.Errorf("a request after a refused one was processed: %q", got)
	}
}

// Requests Envoy accepts pass as before, pipelined on one connection: a content-length
// body, a chunked one, one without a body, all answered in order on a connection that
// stays open.
func TestFramingPassesGoodRequests(t *testing.T) {
	d := startDemo(t, nil)
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(chatBody), chatBody)
	payload := "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(chatBody), chatBody) +
		"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked +
		"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n"
	resps, bodies, closed := rawExchange(t, d.Addr, payload, 2*time.Second)
	if len(resps) != 3 || closed {
		t.Fatalf("got %v (closed %v); want three answers on an open connection: %q", statuses(resps), closed, bodies)
	}
	for i, r := range resps {
		if r.StatusCode != 200 {
			t.Errorf("response %d: %d %q", i+1, r.StatusCode, bodies[i])
		}
	}
	if got := resps[2].Header.Get("x-spillway-provider"); got != "" || !strings.Contains(bodies[2], `"object"`) {
		t.Errorf("GET /v1/models: provider %q body %q", got, bodies[2])
	}
}

func statuses(rs []*http.Response) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.StatusCode
	}
	return out
}
