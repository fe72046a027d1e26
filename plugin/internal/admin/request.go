package admin

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/plugin/internal/jsonscan"
)

// Endpoint is one admin API path.
type Endpoint uint8

// Endpoints, by their path under the prefix (OmniRoute's paths under /api/).
const (
	EndpointHealth         Endpoint = iota + 1 // monitoring/health
	EndpointReset                              // resilience/reset
	EndpointModelCooldowns                     // resilience/model-cooldowns
	EndpointCooldowns                          // resilience/cooldowns
)

// endpoints maps each path under the prefix to its endpoint and the methods it answers.
var endpoints = [...]struct {
	path    string
	ep      Endpoint
	methods string // the Allow header's value
}{
	{"monitoring/health", EndpointHealth, "GET"},
	{"resilience/reset", EndpointReset, "POST"},
	{"resilience/model-cooldowns", EndpointModelCooldowns, "GET, DELETE"},
	{"resilience/cooldowns", EndpointCooldowns, "GET, POST"},
}

// String returns the endpoint's path under the prefix.
func (e Endpoint) String() string {
	for _, x := range endpoints {
		if x.ep == e {
			return x.path
		}
	}
	return "endpoint(" + strconv.Itoa(int(e)) + ")"
}

// Call is one validated admin API call.
type Call struct {
	Endpoint Endpoint
	Method   string // GET, POST or DELETE
	// Provider limits the call to one provider (?provider= on a listing, "provider" in a
	// body); "" = every provider.
	Provider string
	// Connection names one connection (DELETE model-cooldowns); "" = every connection of
	// Provider.
	Connection string
	// Model is the model to re-enable (DELETE model-cooldowns).
	Model string
	// ConnectionIDs are the connections to clear (POST cooldowns), without repeats.
	ConnectionIDs []string
	// All selects every connection (POST cooldowns) or every lockout (DELETE
	// model-cooldowns), of Provider when it is set.
	All bool
}

// Limits of what an admin request may carry.
const (
	// MaxBodyBytes bounds an admin request body (413 past it).
	MaxBodyBytes = 64 << 10
	// MaxConnectionIDs bounds connectionIds (as OmniRoute's cooldown manager does).
	MaxConnectionIDs = 1000
	// maxIDBytes bounds a provider or connection id (the engine's mechanisms accept 128).
	maxIDBytes = 128
	// maxModelBytes bounds a model name (as the model lockout accepts).
	maxModelBytes = 256
)

// HasBody reports whether a request with method carries a body the call reads (POST,
// DELETE); the filter then holds the request for it.
func HasBody(method string) bool { return method == "POST" || method == "DELETE" }

// Parse validates an admin request: its path under prefix (with the query), its method and
// its body. It never panics; every refusal is an *Error with the HTTP status and a stable
// code. Ids are checked for shape only: whether the policy configures them is the engine's
// answer (unknown_provider, unknown_connection).
func Parse(prefix, method, path string, body []byte) (Call, *Error) {
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return Call{}, notFound(path)
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	rest = strings.TrimSuffix(rest, "/")
	var c Call
	allow := ""
	for _, x := range endpoints {
		if x.path == rest {
			c.Endpoint, allow = x.ep, x.methods
			break
		}
	}
	if c.Endpoint == 0 {
		return Call{}, notFound(path)
	}
	if !allowed(allow, method) {
		return Call{}, methodNotAllowed(method, c.Endpoint, allow)
	}
	c.Method = method
	if len(body) > MaxBodyBytes {
		return Call{}, tooLarge()
	}
	if method == "GET" {
		return c, c.query(rawQuery)
	}
	return c, c.body(body)
}

// allowed reports whether method is one of the comma-separated methods.
func allowed(methods, method string) bool {
	for m := range strings.SplitSeq(methods, ", ") {
		if m == method {
			return true
		}
	}
	return false
}

// query reads a listing's query: ?provider= (empty = every provider). Other parameters are
// ignored, as OmniRoute ignores them (monitoring/health's deep=1, say).
func (c *Call) query(raw string) *Error {
	if raw == "" {
		return nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return invalidQuery("the query string is not valid URL encoding")
	}
	vs := q["provider"]
	switch {
	case len(vs) > 1:
		return invalidQuery("provider is given more than once")
	case len(vs) == 1 && vs[0] != "":
		if e := checkID("provider", vs[0]); e != nil {
			e.Code = CodeInvalidQuery
			return e
		}
		c.Provider = vs[0]
	}
	return nil
}

// body reads the JSON body of a POST or DELETE.
func (c *Call) body(body []byte) *Error {
	if c.Endpoint == EndpointReset && len(strings.TrimSpace(string(body))) == 0 {
		return nil // POST resilience/reset with no body resets every provider (as OmniRoute's)
	}
	obj, e := parseObject(body)
	if e != nil {
		return e
	}
	switch c.Endpoint {
	case EndpointReset:
		return c.resetBody(obj)
	case EndpointCooldowns:
		return c.clearBody(obj)
	}
	return c.deleteLockoutBody(obj)
}

// object is a JSON object's fields by name, each once.
type object map[string]gjson.Result

// parseObject checks that body is one JSON object with distinct keys. The check is
// jsonscan's iterative pass, nesting bounded (gjson.Valid recurses once per level); gjson
// then reads only the top level.
func parseObject(body []byte) (object, *Error) {
	if err := jsonscan.Valid(body); err != nil {
		return nil, invalidJSON("the request body " + err.Error())
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, invalidJSON("the request body must be a JSON object")
	}
	obj := object{}
	var dup *Error
	root.ForEach(func(k, v gjson.Result) bool {
		if _, seen := obj[k.Str]; seen {
			dup = invalidField(k.Str, "is given more than once")
			return false
		}
		obj[k.Str] = v
		return true
	})
	if dup != nil {
		return nil, dup
	}
	return obj, nil
}

// only refuses a field other than known.
func (o object) only(known ...string) *Error {
	for k := range o {
		found := false
		for _, name := range known {
			found = found || k == name
		}
		if !found {
			return unknownField(k, known)
		}
	}
	return nil
}

// str reads an optional string field ("" when absent); null and other types are refused.
func (o object) str(name string) (string, bool, *Error) {
	v, ok := o[name]
	if !ok {
		return "", false, nil
	}
	if v.Type != gjson.String {
		return "", false, invalidField(name, "must be a string")
	}
	return v.Str, true, nil
}

// boolean reads an optional boolean field (false when absent).
func (o object) boolean(name string) (bool, *Error) {
	v, ok := o[name]
	if !ok {
		return false, nil
	}
	if v.Type != gjson.True && v.Type != gjson.False {
		return false, invalidField(name, "must be true or false")
	}
	return v.Bool(), nil
}

// id reads an optional provider or connection id field.
func (o object) id(name string) (string, *Error) {
	s, ok, e := o.str(name)
	if e != nil || !ok {
		return "", e
	}
	if e := checkID(name, s); e != nil {
		return "", e
	}
	return s, nil
}

// checkID checks an id's shape: 1 to 128 printable ASCII bytes.
func checkID(name, s string) *Error {
	if s == "" || len(s) > maxIDBytes {
		return invalidField(name, "must be 1 to "+strconv.Itoa(maxIDBytes)+" bytes")
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b >= 0x7f {
			return invalidField(name, "must be printable ASCII without spaces")
		}
	}
	return nil
}

// resetBody: {"provider"?: string}.
func (c *Call) resetBody(o object) *Error {
	if e := o.only("provider"); e != nil {
		return e
	}
	var e *Error
	c.Provider, e = o.id("provider")
	return e
}

// clearBody: {"connectionIds": string[]} or {"all": true, "provider"?: string} (guide §3,
// Cooldown Manager); "provider" may also limit connectionIds to one provider.
func (c *Call) clearBody(o object) *Error {
	if e := o.only("connectionIds", "all", "provider"); e != nil {
		return e
	}
	var e *Error
	if c.All, e = o.boolean("all"); e != nil {
		return e
	}
	if c.Provider, e = o.id("provider"); e != nil {
		return e
	}
	if v, ok := o["connectionIds"]; ok {
		if !v.IsArray() {
			return invalidField("connectionIds", "must be an array of connection ids")
		}
		items := v.Array()
		if len(items) > MaxConnectionIDs {
			return invalidField("connectionIds", "holds more than "+strconv.Itoa(MaxConnectionIDs)+" ids")
		}
		seen := make(map[string]bool, len(items))
		for i, it := range items {
			field := "connectionIds[" + strconv.Itoa(i) + "]"
			if it.Type != gjson.String {
				return invalidField(field, "must be a string")
			}
			if e := checkID(field, it.Str); e != nil {
				return e
			}
			if !seen[it.Str] {
				seen[it.Str] = true
				c.ConnectionIDs = append(c.ConnectionIDs, it.Str)
			}
		}
	}
	switch {
	case c.All && len(c.ConnectionIDs) > 0:
		return invalidField("all", "cannot be combined with connectionIds: give one or the other")
	case !c.All && len(c.ConnectionIDs) == 0:
		return missingField("connectionIds", "give connectionIds, or set all to true")
	}
	return nil
}

// deleteLockoutBody: {"provider", "connection", "model"} (guide §3, Model Cooldowns; the
// connection may be named "connectionId", as OmniRoute's later routes call it, or left out
// for every connection of the provider), or {"all": true, "provider"?}.
func (c *Call) deleteLockoutBody(o object) *Error {
	if e := o.only("provider", "connection", "connectionId", "model", "all"); e != nil {
		return e
	}
	var e *Error
	if c.All, e = o.boolean("all"); e != nil {
		return e
	}
	if c.Provider, e = o.id("provider"); e != nil {
		return e
	}
	conn, e := o.id("connection")
	if e != nil {
		return e
	}
	alias, e := o.id("connectionId")
	if e != nil {
		return e
	}
	if conn != "" && alias != "" && conn != alias {
		return invalidField("connectionId", "names another connection than connection")
	}
	if c.Connection = conn; conn == "" {
		c.Connection = alias
	}
	model, hasModel, e := o.str("model")
	if e != nil {
		return e
	}
	if c.All {
		if c.Connection != "" || hasModel {
			return invalidField("all", "clears every lockout (of provider, if given): it takes no connection or model")
		}
		return nil
	}
	switch {
	case c.Provider == "":
		return missingField("provider", "give provider and model (and connection), or set all to true")
	case !hasModel:
		return missingField("model", "give the model to re-enable")
	case model == "" || len(model) > maxModelBytes:
		return invalidField("model", "must be 1 to "+strconv.Itoa(maxModelBytes)+" bytes")
	}
	for i := 0; i < len(model); i++ {
		if b := model[i]; b < ' ' || b == 0x7f {
			return invalidField("model", "must not contain control characters")
		}
	}
	c.Model = model
	return nil
}
