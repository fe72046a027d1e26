package admission

import (
	"errors"

	"github.com/spillwayproxy/spillway/plugin/internal/replies"
)

// Error is a typed admission refusal with the code and HTTP status the client receives.
type Error struct {
	Code   string // stable error.code (replies.Code*)
	Status int    // HTTP status
	msg    string
}

// Error implements error.
func (e *Error) Error() string { return e.msg }

// The admission refusals (guide §5).
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
		return replies.QueueFull(g.provider, g.connection, g.queue.MaxQueueDepth), true
	case errors.Is(err, ErrQueueTimeout):
		return replies.QueueTimeout(g.provider, g.connection, g.queue.MaxWait), true
	case errors.Is(err, ErrSemaphoreQueueFull):
		return replies.SemaphoreQueueFull(g.provider, g.connection, g.queue.MaxQueueDepth), true
	case errors.Is(err, ErrSemaphoreTimeout):
		return replies.SemaphoreTimeout(g.provider, g.connection, g.queue.MaxWait), true
	case errors.Is(err, ErrExecutionTimeout):
		return replies.ExecutionTimeout(g.provider, g.connection, g.queue.ExecutionMaxWait), true
	}
	return replies.Reply{}, false
}
