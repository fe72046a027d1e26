// Package llmapi knows the shape of the LLM APIs Spillway routes — OpenAI (Chat Completions,
// Completions, Embeddings, Responses) and Anthropic Messages: which fields of a request body
// it reads and rewrites, which request headers carry a client's credentials, and how their
// server-sent event streams start, fail and end. It is pure: no proxy-wasm, no shared state.
package llmapi

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// MaxModelLength bounds the model name Spillway accepts from a client (the policy's own
// limit on model names).
const MaxModelLength = 256

// Request is what Spillway reads of a request body.
type Request struct {
	// Model is the requested model. It aliases the body it was read from: copy it (or
	// intern it) before the body goes away.
	Model string
	// Stream is the body's "stream": true (a server-sent event stream is asked for).
	Stream bool
}

// Errors of ParseRequest. Each is a client error, answered 400 invalid_request with the
// error's text (which never quotes the body).
var (
	ErrNotJSON       = errors.New("request body is not a JSON object")
	ErrNoModel       = errors.New(`request body has no "model"`)
	ErrModelNotText  = errors.New(`request body's "model" is not a string`)
	ErrModelTooLong  = fmt.Errorf(`request body's "model" is longer than %d bytes`, MaxModelLength)
	ErrModelNotPrint = errors.New(`request body's "model" is empty or holds control characters`)
)

// ParseRequest reads a request body's top-level model and stream flag. It reads what
// routing needs, not the whole document: the body must be a JSON object with a model
// string; the rest goes to the provider as sent, which answers a malformed body with its own
// 400 (a client error that counts against nothing). The returned Model aliases body; body
// must not be modified while it is in use.
func ParseRequest(body []byte) (Request, error) {
	if req, ok := scanRequest(body); ok {
		return req, nil
	}
	return parseRequestGJSON(body)
}

// parseRequestGJSON is ParseRequest with gjson: every body the fast scan leaves, and the
// reference the scan must agree with.
func parseRequestGJSON(body []byte) (Request, error) {
	s := unsafeString(body)
	root := gjson.Parse(s)
	if !root.IsObject() {
		return Request{}, ErrNotJSON
	}
	var req Request
	var model gjson.Result
	seenModel, seenStream := false, false
	root.ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "model":
			if !seenModel {
				model, seenModel = value, true
			}
		case "stream":
			if !seenStream {
				req.Stream, seenStream = value.Type == gjson.True, true
			}
		}
		return !(seenModel && seenStream)
	})
	switch {
	case !seenModel || model.Type == gjson.Null:
		if !gjson.Valid(s) { // only on the error path: say why there is no model
			return Request{}, ErrNotJSON
		}
		return Request{}, ErrNoModel
	case model.Type != gjson.String:
		return Request{}, ErrModelNotText
	case len(model.Str) > MaxModelLength:
		return Request{}, ErrModelTooLong
	case !printable(model.Str):
		return Request{}, ErrModelNotPrint
	}
	req.Model = model.Str
	return req, nil
}

// ValidModel reports whether a model name a client sent outside the body (header-routed
// mode's model header) is one ParseRequest would accept in a body: non-empty, at most
// MaxModelLength bytes, free of control bytes.
func ValidModel(m string) bool { return len(m) <= MaxModelLength && printable(m) }

// printable reports whether a model name is non-empty and free of control bytes, so it can
// be echoed in a response header (no CR/LF can reach a header value).
func printable(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// RewriteModel returns body with its top-level "model" set to model (a new slice; body is
// not modified).
func RewriteModel(body []byte, model string) ([]byte, error) {
	out, err := sjson.SetBytesOptions(body, "model", model, &sjson.Options{Optimistic: true})
	if err != nil {
		return nil, fmt.Errorf("llmapi: rewrite model: %w", err)
	}
	return out, nil
}

// unsafeString views b as a string without copying. The string is valid while b is
// unchanged.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
