package admission

import (
	"errors"
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/replies"
)

// Error is a typed admission refusal with the code and HTTP status the client receives.
// errors.Is matches it to the sentinel of its code (ErrQueueFull, ...).
type Error struct {
	Code   string // stable error.code (replies.Code*)
	Status int    // HTTP status
	msg    string

	// Where and why, for RATE_LIMIT_QUEUE_FULL from Admit (the sentinels leave them empty).
	Provider, Connection, Model string
	Limit                       int // maxQueueDepth
	Queued                      int // requests waiting when this one was refused
}

// Error implements error.
func (e *Error) Error() string { return e.msg }

// Is reports whether target is an admission error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// queueFull is Admit's RATE_LIMIT_QUEUE_FULL refusal, naming the limit, where it applies
// and the queue's real length.
func queueFull(g *Gate, model string, queued int) *Error {
	return &Error{
		Code: replies.CodeQueueFull, Status: 429,
		msg: fmt.Sprintf("admission: request queue of %s full for model %q: %d waiting, maxQueueDepth %d (RATE_LIMIT_QUEUE_FULL)",
			g, model, queued, g.queue.MaxQueueDepth),
		Provider: g.provider, Connection: g.connection, Model: model, Limit: g.queue.MaxQueueDepth, Queued: queued,
	}
}

// semaphoreQueueFull is Admit's SEMAPHORE_QUEUE_FULL refusal: only the model's cap keeps the
// request waiting and the queue is full (the per-model gate, guide §4).
func semaphoreQueueFull(g *Gate, model string, queued int) *Error {
	return &Error{
		Code: replies.CodeSemaphoreQueueFull, Status: 429,
		msg: fmt.Sprintf("admission: model gate of %s full for model %q: %d waiting, maxQueueDepth %d (SEMAPHORE_QUEUE_FULL)",
			g, model, queued, g.queue.MaxQueueDepth),
		Provider: g.provider, Connection: g.connection, Model: model, Limit: g.queue.MaxQueueDepth, Queued: queued,
	}
}

// The admission refusals (guide §4 and §5).
var (
	// ErrQueueFull: the connection's queue already holds maxQueueDepth requests; this one
	// was refused before queuing.
	ErrQueueFull = &Error{Code: replies.CodeQueueFull, Status: 429, msg: "admission: request queue full (RATE_LIMIT_QUEUE_FULL)"}
	// ErrQueueTimeout: the request's queue wait budget (maxWaitMs) ran out before it got a
	// slot; it never reaches the upstream.
	ErrQueueTimeout = &Error{Code: replies.CodeQueueTimeout, Status: 429, msg: "admission: queue wait budget exceeded (RATE_LIMIT_QUEUE_TIMEOUT)"}
	// ErrSemaphoreQueueFull: the request waits only for its model's cap (modelConcurrency)
	// and maxQueueDepth requests already wait: the per-model gate refuses it (guide §4).
	ErrSemaphoreQueueFull = &Error{Code: replies.CodeSemaphoreQueueFull, Status: 429, msg: "admission: model gate queue full (SEMAPHORE_QUEUE_FULL)"}
	// ErrSemaphoreTimeout: the request waited its whole budget for its model's cap.
	ErrSemaphoreTimeout = &Error{Code: replies.CodeSemaphoreTimeout, Status: 429, msg: "admission: model gate wait budget exceeded (SEMAPHORE_TIMEOUT)"}
	// ErrExecutionTimeout: the request ran past executionMaxWaitMs after dispatch.
	ErrExecutionTimeout = &Error{Code: replies.CodeExecutionTimeout, Status: 504, msg: "admission: execution limit exceeded (RATE_LIMIT_EXECUTION_TIMEOUT)"}
)

// Reply builds the client reply for an admission refusal on g (ok=false for any other error:
// a store failure is not the client's business, and the caller fails open on it).
func (g *Gate) Reply(err error) (reply replies.Reply, ok bool) {
	switch {
	case errors.Is(err, ErrQueueFull):
		full := &Error{Provider: g.provider, Connection: g.connection, Limit: g.queue.MaxQueueDepth, Queued: g.queue.MaxQueueDepth}
		if e := (*Error)(nil); errors.As(err, &e) && e.Provider != "" {
			full = e
		}
		return replies.QueueFull(full.Provider, full.Connection, full.Model, full.Limit, full.Queued), true
	case errors.Is(err, ErrQueueTimeout):
		return replies.QueueTimeout(g.provider, g.connection, g.queue.MaxWait), true
	case errors.Is(err, ErrSemaphoreQueueFull):
		model, queued := "", g.queue.MaxQueueDepth
		if e := (*Error)(nil); errors.As(err, &e) && e.Provider != "" {
			model, queued = e.Model, e.Queued
		}
		return replies.SemaphoreQueueFull(g.provider, g.connection, model, g.queue.MaxQueueDepth, queued), true
	case errors.Is(err, ErrSemaphoreTimeout):
		return replies.SemaphoreTimeout(g.provider, g.connection, g.queue.MaxWait), true
	case errors.Is(err, ErrExecutionTimeout):
		return replies.ExecutionTimeout(g.provider, g.connection, g.queue.ExecutionMaxWait), true
	}
	return replies.Reply{}, false
}
