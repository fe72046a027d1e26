package llmapi

import "strconv"

// AppendStreamError appends to dst the events that end a stream with an error, in the
// shape of the stream's API, so that its SDKs report the error instead of a connection that
// broke off (a proxy cannot end a response that is under way any other way, see the filter):
//
//   - Chat Completions (and a stream whose shape is unknown): a data line with an "error"
//     object — what OpenAI sends and what its SDKs raise on (openai-go's ssestream and
//     openai-python's Stream raise on a chunk with an "error" member) — then "data: [DONE]".
//   - Responses: a response.failed event, the API's own end of a failed response, with
//     response.error {code, message}.
//   - Anthropic Messages: an "error" event {"type":"error","error":{"type","message"}}, as
//     the API sends an overloaded_error mid-stream.
//
// code is a stable code (also put in the message for Anthropic, whose errors have none);
// errType the error's type (OpenAI's and Anthropic's classes, e.g. "timeout_error").
func AppendStreamError(dst []byte, shape StreamShape, errType, code, message string) []byte {
	switch shape {
	case ShapeResponses:
		dst = append(dst, "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":"...)
		dst = appendJSONString(dst, code)
		dst = append(dst, ",\"message\":"...)
		dst = appendJSONString(dst, message)
		return append(dst, "}}}\n\n"...)
	case ShapeAnthropic:
		dst = append(dst, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"...)
		dst = appendJSONString(dst, errType)
		dst = append(dst, ",\"message\":"...)
		dst = appendJSONString(dst, message+" ("+code+")")
		return append(dst, "}}\n\n"...)
	}
	dst = append(dst, "data: {\"error\":{\"message\":"...)
	dst = appendJSONString(dst, message)
	dst = append(dst, ",\"type\":"...)
	dst = appendJSONString(dst, errType)
	dst = append(dst, ",\"code\":"...)
	dst = appendJSONString(dst, code)
	return append(dst, "}}\n\ndata: [DONE]\n\n"...)
}

// appendJSONString appends s as a JSON string: quotes, backslashes and control characters
// escaped; other bytes (UTF-8 included) as they are.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, `\u00`...)
			if c < 0x10 {
				dst = append(dst, '0')
			}
			dst = strconv.AppendUint(dst, uint64(c), 16)
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
