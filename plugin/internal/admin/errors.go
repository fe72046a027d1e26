package admin

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/spillwayproxy/spillway/plugin/internal/replies"
)

// Stable error codes of the admin API's refusals (the body's error.code), next to the
// replies package's unauthorized (401), forbidden (403), request_too_large (413) and
// internal_error (500).
const (
	CodeInvalidJSON       = "invalid_json"       // 400: the body is not one JSON object
	CodeUnknownField      = "unknown_field"      // 400: a field the call does not take
	CodeInvalidField      = "invalid_field"      // 400: a field of the wrong type or value
	CodeMissingField      = "missing_field"      // 400: a required field is absent
	CodeInvalidQuery      = "invalid_query"      // 400: the query string cannot be read
	CodeUnknownProvider   = "unknown_provider"   // 400: the policy configures no such provider
	CodeUnknownConnection = "unknown_connection" // 400: no such connection (of that provider)
	CodeNotFound          = "not_found"          // 404: no admin endpoint at the path
	CodeMethodNotAllowed  = "method_not_allowed" // 405: the endpoint does not answer the method
)

// Error is a refused admin request: an HTTP status with a stable code, a message, and the
// field or parameter at fault (Param, "" when none). It carries only fixed text and the
// request's own field names and ids, clipped.
type Error struct {
	Status  int
	Code    string
	Message string
	Param   string
	Allow   string // 405: the methods the endpoint answers
}

// Error implements error.
func (e *Error) Error() string {
	s := "admin: " + strconv.Itoa(e.Status) + " " + e.Code + ": " + e.Message
	if e.Param != "" {
		s += " (" + e.Param + ")"
	}
	return s
}

// maxEchoBytes bounds request text (a field name, an id, a path) echoed in a message.
const maxEchoBytes = 128

func clip(s string) string {
	if len(s) > maxEchoBytes {
		return s[:maxEchoBytes] + "…"
	}
	return s
}

func invalidJSON(msg string) *Error {
	return &Error{Status: 400, Code: CodeInvalidJSON, Message: msg}
}

func unknownField(name string, known []string) *Error {
	return &Error{Status: 400, Code: CodeUnknownField, Param: clip(name),
		Message: "unknown field " + strconv.Quote(clip(name)) + "; this call takes " + strings.Join(known, ", ")}
}

func invalidField(name, problem string) *Error {
	return &Error{Status: 400, Code: CodeInvalidField, Param: clip(name), Message: clip(name) + " " + problem}
}

func missingField(name, hint string) *Error {
	return &Error{Status: 400, Code: CodeMissingField, Param: name, Message: name + " is required: " + hint}
}

func invalidQuery(msg string) *Error {
	return &Error{Status: 400, Code: CodeInvalidQuery, Param: "provider", Message: msg}
}

func notFound(path string) *Error {
	p, _, _ := strings.Cut(path, "?")
	return &Error{Status: 404, Code: CodeNotFound, Message: "no admin endpoint at " + strconv.Quote(clip(p)) +
		"; the admin API serves monitoring/health, resilience/reset, resilience/model-cooldowns and resilience/cooldowns"}
}

// refusedLookalike is LookalikeReply's refusal: no path or reason echoed.
func refusedLookalike() *Error {
	return &Error{Status: 404, Code: CodeNotFound, Message: "not found"}
}

func methodNotAllowed(method string, ep Endpoint, allow string) *Error {
	return &Error{Status: 405, Code: CodeMethodNotAllowed, Allow: allow,
		Message: ep.String() + " answers " + allow + ", not " + strconv.Quote(clip(method))}
}

func tooLarge() *Error {
	return &Error{Status: 413, Code: replies.CodeRequestTooLarge,
		Message: "the admin request body is larger than the limit of " + strconv.Itoa(MaxBodyBytes) + " bytes"}
}

// errorBody is the OpenAI error shape every Spillway reply uses, with the field at fault.
type errorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
		Param   string `json:"param,omitempty"`
	} `json:"error"`
}

// Reply renders the refusal.
func (e *Error) Reply() replies.Reply {
	var b errorBody
	b.Error.Message, b.Error.Code, b.Error.Param = e.Message, e.Code, e.Param
	b.Error.Type = replies.TypeInvalidRequest
	if e.Status >= 500 {
		b.Error.Type = replies.TypeServer
	}
	r := jsonReply(e.Status, b)
	r.Code = e.Code
	if e.Allow != "" {
		r.Headers = append(r.Headers, [2]string{"allow", e.Allow})
	}
	return r
}

// jsonReply is a JSON reply of v. The admin API's bodies are small and off the request
// path, so they are rendered with encoding/json; a value that cannot be rendered (never:
// every body is a plain struct) is a 500.
func jsonReply(status int, v any) replies.Reply {
	body, err := json.Marshal(v)
	if err != nil {
		return replies.Internal()
	}
	return replies.Reply{Status: status, Body: body, Headers: [][2]string{
		{replies.HeaderContentType, replies.ContentTypeJSON},
		{"cache-control", "no-store"}, // state changes from one call to the next
	}}
}
