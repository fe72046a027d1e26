// Package admin is Spillway's admin API without the ABI: it checks an admin request's bearer
// token, parses and validates the call, runs it on the engine and renders the
// OmniRoute-compatible JSON reply.
//
// The paths are OmniRoute's (guide §1 "Status-API: GET /api/monitoring/health", "Reset-API:
// POST /api/resilience/reset"; §3 "Model Cooldowns-dashboard" and "Cooldown Manager") under
// the policy's admin.pathPrefix (default /spillway/api/; set /api/ for OmniRoute's exact
// paths):
//
//	GET    monitoring/health            every layer of every provider and connection
//	POST   resilience/reset             {provider?}: the operator's reset, terminal states included
//	GET    resilience/model-cooldowns   [?provider=] active model lockouts
//	DELETE resilience/model-cooldowns   {provider, connection?, model} or {all: true, provider?}
//	GET    resilience/cooldowns         [?provider=] connections with cooldown, backoff, last error, lockouts
//	POST   resilience/cooldowns         {connectionIds} or {all: true, provider?}
//	                                    → {cleared, unchanged, skippedTerminal, lockoutsCleared}
//
// Access: the admin API is on only when the policy sets admin.token; without one its paths
// are ordinary requests and pass through. A request under the prefix without a bearer token
// is answered 401, with another token 403; the token is compared in constant time (a hash
// of each side, so not even its length leaks) and the server keeps only its hash. No reply
// carries a credential, the token or a credential fingerprint: replies are built from the
// engine's snapshots, which hold ids, states, counts and times only.
package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"strings"

	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/policies"
)

// Server answers the admin API for one policy's engine. It is used by one worker at a time,
// as the engine is.
type Server struct {
	prefix    string
	tokenHash [sha256.Size]byte
	engine    *engine.Engine
}

// New returns the admin API of settings over e, or nil when it is off (no token): a nil
// Server matches no path.
func New(settings policies.AdminSettings, e *engine.Engine) *Server {
	token := settings.Token.Reveal()
	if !settings.Enabled || token == "" {
		return nil
	}
	prefix := settings.PathPrefix // validated: starts and ends with '/', not "/"
	if prefix == "" {
		prefix = policies.AdminPathPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Server{prefix: prefix, tokenHash: sha256.Sum256([]byte(token)), engine: e}
}

// Prefix returns the path prefix the API is served under.
func (s *Server) Prefix() string { return s.prefix }

// Matches reports whether a request path (with its query) is the admin API's: under the
// prefix, or the prefix without its trailing '/' (answered 404 after the token check, rather
// than sent upstream with the admin token). It is false for a nil Server: with the API off
// every path passes through.
func (s *Server) Matches(path string) bool {
	if s == nil {
		return false
	}
	if strings.HasPrefix(path, s.prefix) {
		return true
	}
	rest, ok := strings.CutPrefix(path, s.prefix[:len(s.prefix)-1])
	return ok && (rest == "" || rest[0] == '?')
}

// Authorize checks a request's Authorization header (present=false when it has none): a
// bearer token equal to the policy's passes; none, or another scheme, is 401; another token
// is 403. The reply is the refusal when ok is false.
func (s *Server) Authorize(authorization string, present bool) (r replies.Reply, ok bool) {
	scheme, token, found := strings.Cut(strings.TrimSpace(authorization), " ")
	token = strings.TrimSpace(token)
	if !present || !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return noStore(replies.Unauthorized()), false
	}
	given := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(given[:], s.tokenHash[:]) != 1 {
		return noStore(replies.Forbidden()), false
	}
	return replies.Reply{}, true
}

func noStore(r replies.Reply) replies.Reply {
	r.Headers = append(r.Headers, [2]string{"cache-control", "no-store"})
	return r
}

// Response is an answered admin call.
type Response struct {
	Reply replies.Reply
	// Call is the call answered (zero when the request was refused).
	Call Call
	// Log is the info log line of a reset — what the call cleared and where it was asked
	// (the path, without its query) — or "" for a read or a refusal.
	Log string
	// Errors are the layers the call could not read or write, with the store's errors, for
	// a warning log; the reply names only the layers.
	Errors error
}

// Serve answers an authorized admin request: method and path (with its query) as the
// client sent them, body the whole request body (nil for none).
func (s *Server) Serve(method, path string, body []byte) Response {
	c, perr := Parse(s.prefix, method, path, body)
	if perr != nil {
		return Response{Reply: perr.Reply()}
	}
	where, _, _ := strings.Cut(path, "?")
	res := Response{Call: c}
	var err error
	switch {
	case c.Endpoint == EndpointHealth:
		var h engine.Health
		if h, err = s.engine.Health(c.Provider); err == nil {
			res.Reply = renderHealth(h)
			res.Errors = engine.JoinLayerErrors(h.Errors)
		}
	case c.Endpoint == EndpointCooldowns && c.Method == "GET":
		var h engine.Health
		if h, err = s.engine.Health(c.Provider); err == nil {
			res.Reply = renderCooldowns(h)
			res.Errors = engine.JoinLayerErrors(h.Errors)
		}
	case c.Endpoint == EndpointModelCooldowns && c.Method == "GET":
		var l engine.LockoutList
		if l, err = s.engine.Lockouts(c.Provider); err == nil {
			res.Reply = renderLockouts(l.At, l.Lockouts, l.Errors)
			res.Errors = engine.JoinLayerErrors(l.Errors)
		}
	case c.Endpoint == EndpointReset:
		var rep engine.ResetReport
		if rep, err = s.engine.Reset(c.Provider); err == nil {
			res.Reply, res.Log = renderReset(rep), logReset(method, where, rep)
			res.Errors = engine.JoinLayerErrors(rep.Errors)
		}
	case c.Endpoint == EndpointCooldowns:
		var rep engine.ClearReport
		sel := engine.CooldownSelection{ConnectionIDs: c.ConnectionIDs, All: c.All, Provider: c.Provider}
		if rep, err = s.engine.ClearCooldowns(sel); err == nil {
			res.Reply, res.Log = renderClear(rep), logClear(method, where, c, rep)
			res.Errors = engine.JoinLayerErrors(rep.Errors)
		}
	default: // DELETE resilience/model-cooldowns
		var rep engine.LockoutClear
		if c.All {
			rep, err = s.engine.ClearAllModelLockouts(c.Provider)
		} else {
			rep, err = s.engine.ClearModelLockout(c.Provider, c.Connection, c.Model)
		}
		if err == nil {
			res.Reply, res.Log = renderLockoutClear(c, rep), logLockoutClear(method, where, c, rep)
			res.Errors = engine.JoinLayerErrors(rep.Errors)
		}
	}
	if err != nil {
		res.Reply, res.Log = refusal(c, err).Reply(), ""
	}
	return res
}

// refusal turns the engine's answer for an id the policy does not configure into a 400.
func refusal(c Call, err error) *Error {
	var unknown *engine.UnknownError
	if !errors.As(err, &unknown) {
		return &Error{Status: 500, Code: replies.CodeInternal, Message: "the admin call failed"}
	}
	if unknown.What == "provider" {
		return &Error{Status: 400, Code: CodeUnknownProvider, Param: "provider",
			Message: "the policy configures no provider " + quote(unknown.ID)}
	}
	param := "connection"
	if c.Endpoint == EndpointCooldowns {
		param = "connectionIds"
	}
	e := &Error{Status: 400, Code: CodeUnknownConnection, Param: param,
		Message: "the policy configures no connection " + quote(unknown.ID)}
	if unknown.Provider != "" {
		e.Message = "connection " + quote(unknown.ID) + " is not a connection of provider " + quote(unknown.Provider)
	}
	return e
}
