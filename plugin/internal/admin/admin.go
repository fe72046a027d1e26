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
// of each side, so not even its length leaks) and the server keeps only its hashes. No reply
// carries a credential, the token or a credential fingerprint: replies are built from the
// engine's snapshots, which hold ids, states, counts and times only.
//
// Lookalikes: the token never leaves the proxy. A path that spells the prefix otherwise
// (Classify, path.go) and a request elsewhere whose client credential is the token
// (IsToken) are refused (LookalikeReply) rather than forwarded with it.
package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"hash/maphash"
	"strings"

	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/policies"
)

// Server answers the admin API for one policy's engine. It is used by one worker at a time,
// as the engine is.
type Server struct {
	prefix      string
	canonPrefix string // CanonicalPath of prefix (ends with '/')
	tokenHash   [sha256.Size]byte
	// screenSeed and tokenScreen screen client credentials before their SHA-256 (IsToken):
	// the token's screen digest under a seed drawn at start.
	screenSeed, tokenScreen uint64
	lookalike               replies.Reply // LookalikeReply, rendered once
	engine                  *engine.Engine
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
	// The runtime's random source, seeded at VM start (no host call here, and no failure).
	seed := maphash.String(maphash.MakeSeed(), "spillway admin token screen")
	return &Server{prefix: prefix, canonPrefix: string(CanonicalPath(nil, prefix)), tokenHash: sha256.Sum256([]byte(token)),
		screenSeed: seed, tokenScreen: screen(seed, token), lookalike: refusedLookalike().Reply(), engine: e}
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
	token, found := bearer(strings.TrimSpace(authorization))
	if !present || !found {
		return noStore(replies.Unauthorized()), false
	}
	if !s.hashIsToken(token) {
		return noStore(replies.Forbidden()), false
	}
	return replies.Reply{}, true
}

// bearer returns the credentials of an Authorization value (trimmed) with the Bearer scheme
// (any case), ok false for another scheme or none: the value up to its first space folds to
// "Bearer" (ASCII case: no letter of it has another fold), and what follows, trimmed, is not
// empty.
func bearer(v string) (token string, ok bool) {
	if len(v) < len("Bearer ") || v[6] != ' ' || v[0]|0x20 != 'b' || v[1]|0x20 != 'e' || v[2]|0x20 != 'a' ||
		v[3]|0x20 != 'r' || v[4]|0x20 != 'e' || v[5]|0x20 != 'r' {
		return "", false
	}
	token = strings.TrimSpace(v[7:])
	return token, token != ""
}

// hashIsToken compares v with the token in constant time, over SHA-256 hashes.
func (s *Server) hashIsToken(v string) bool {
	given := sha256.Sum256([]byte(v))
	return subtle.ConstantTimeCompare(given[:], s.tokenHash[:]) == 1
}

// IsToken reports whether the value of a client credential header (llmapi.CredentialHeaders)
// is the admin token: the credentials after a Bearer scheme as Authorize reads them, or else
// the whole value (trimmed). (The policy refuses a token with whitespace in it, so a value
// with a scheme is never the token whole.) The filter asks it of every request that is not
// the admin API's, so it must be cheap, and a SHA-256 costs a Go wasm module microseconds:
// the candidate is screened first by a seeded 64-bit digest (screen) whose time depends on
// its length alone. Only the token itself, or a value in about 2^64, passes the screen to
// the constant-time comparison of SHA-256 hashes, so how long a request takes tells nothing
// of the token, nor its length, that the refusal itself does not. False for a nil Server.
func (s *Server) IsToken(value string) bool {
	if s == nil {
		return false
	}
	v := strings.TrimSpace(value)
	if token, ok := bearer(v); ok {
		v = token
	}
	return screen(s.screenSeed, v) == s.tokenScreen && s.hashIsToken(v)
}

// screen is the screen digest of v under seed: FNV-1a's round (xor a byte, multiply by the
// 64-bit FNV prime) from a random offset. It is written out rather than hash/fnv's (whose
// New64a allocates behind an interface and takes no seed) or hash/maphash's (a 128-bit
// multiply per block, which a Go wasm module emulates: several times the cost per request);
// a screen needs no more than digests that differ for different values, since SHA-256
// decides.
func screen(seed uint64, v string) uint64 {
	h := seed
	for i := 0; i < len(v); i++ {
		h = (h ^ uint64(v[i])) * screenPrime
	}
	return h
}

// screenPrime is FNV's 64-bit prime.
const screenPrime = 1099511628211

// LookalikeReply is the answer to a request that looks like the admin API without being it
// (Classify's PathLookalike, or IsToken on a request elsewhere): 404 not_found, the same
// for both, so it says neither which nor whether the token was right.
func (s *Server) LookalikeReply() replies.Reply { return s.lookalike }

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
