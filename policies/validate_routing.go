package policies

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Bounds on routing (Spillway's own): the path table stays small enough that matching a
// request path is one map lookup, and a cluster header name stays an ordinary header name.
const (
	maxRoutingPaths       = 32  // per API
	maxRoutingPathBytes   = 256 // per path
	maxClusterHeaderBytes = 128
)

// wellKnownCredentialHeaders are the headers providers read credentials from. The cluster
// header must never be one of them: Spillway would overwrite a credential with a cluster
// name (or send a cluster name where a key belongs).
var wellKnownCredentialHeaders = []string{"authorization", "x-api-key", "api-key", "x-goog-api-key"}

// routing checks the routing block. It runs after providers and admin, whose credential
// headers and admin prefix it must not collide with.
func (v *validator) routing(r *Routing, path string) {
	v.clusterHeader(r, joinField(path, "clusterHeader"))
	pp := joinField(path, "paths")
	// A list left unset keeps its default paths, which an operator's list must not repeat
	// either: one path, one API.
	seen := make(map[string]string)
	for _, api := range APIs {
		if r.Paths.forAPI(api) == nil {
			for _, p := range RoutingDefaultPaths[api] {
				seen[p] = "the default " + joinField(pp, string(api)) + "; set that list to change it"
			}
		}
	}
	v.routingPaths(joinField(pp, string(APIOpenAI)), r.Paths.OpenAI, seen)
	v.routingPaths(joinField(pp, string(APIAnthropic)), r.Paths.Anthropic, seen)
	v.rangeMs(joinField(path, "bodyWaitMs"), r.BodyWaitMs, msSecond, 10*msMinute)
	v.routingMode(r, path)
	v.unroutedProviders(r)
}

func (v *validator) clusterHeader(r *Routing, hp string) {
	if r.ClusterHeader == "" {
		return // unset: the default
	}
	if lower, ok := v.ownRequestHeader(hp, r.ClusterHeader, "the cluster", "x-spillway-cluster"); ok {
		r.ClusterHeader = lower // Envoy header maps are lower-case
	}
}

// ownRequestHeader checks the name of a request header Spillway owns (it sets or reads it
// and removes what the client sent): purpose says what the header is for in messages
// ("the cluster"), example names a good one. It returns the name lower-cased, as Envoy's
// header maps hold it.
func (v *validator) ownRequestHeader(hp, name, purpose, example string) (string, bool) {
	lower := strings.ToLower(name)
	switch {
	case strings.HasPrefix(name, ":"):
		v.fail(hp, "pseudo header "+v.quote(hp, name)+" cannot name "+purpose+" (want an ordinary header such as "+example+")")
		return "", false
	case !isHTTPToken(name):
		v.fail(hp, "invalid header name "+v.quote(hp, name)+" (want an HTTP token such as "+example+")")
		return "", false
	case len(name) > maxClusterHeaderBytes:
		v.fail(hp, "header name is longer than "+strconv.Itoa(maxClusterHeaderBytes)+" characters")
		return "", false
	case forbiddenCredentialHeaders[lower] && !contains(SessionAffinityHeaders, lower):
		v.fail(hp, "header "+v.quote(hp, name)+" is a hop-by-hop, framing or routing header the proxy owns")
		return "", false
	case contains(wellKnownCredentialHeaders, lower):
		v.fail(hp, "header "+v.quote(hp, name)+" carries credentials; "+purpose+" needs a header of its own")
		return "", false
	case contains(SessionAffinityHeaders, lower):
		v.fail(hp, "header "+v.quote(hp, name)+" is a session header (read for session affinity and never forwarded)")
		return "", false
	case contains(ResponseHeaders, lower):
		v.fail(hp, "header "+v.quote(hp, name)+" is one of Spillway's response headers")
		return "", false
	case strings.HasPrefix(lower, "x-envoy-"):
		v.fail(hp, "header "+v.quote(hp, name)+" is in Envoy's reserved x-envoy- namespace")
		return "", false
	}
	for pi := range v.p.Providers {
		pr := &v.p.Providers[pi]
		for ci := range pr.Connections {
			if cr := pr.Connections[ci].Credential; cr != nil && strings.EqualFold(cr.Header, lower) {
				v.fail(hp, "header "+v.quote(hp, name)+" is the credential header of providers["+strconv.Itoa(pi)+
					"].connections["+strconv.Itoa(ci)+"]; "+purpose+" needs a header of its own")
				return "", false
			}
		}
	}
	return lower, true
}

// routingMode checks the routing mode and the settings of header-routed mode. It runs after
// clusterHeader, whose lower-cased name the model header must differ from, and after the
// routes, one of which must serve defaultModel.
func (v *validator) routingMode(r *Routing, path string) {
	mp := joinField(path, "mode")
	if r.Mode != "" && !validRoutingMode(r.Mode) {
		v.fail(mp, "unknown routing mode "+v.quote(mp, string(r.Mode))+" (want body or headers)")
		return
	}
	hp, dp := joinField(path, "modelHeader"), joinField(path, "defaultModel")
	if r.Mode != RoutingModeHeaders {
		if r.ModelHeader != "" {
			v.warn(hp, "only header-routed mode reads it (routing.mode: headers); body mode reads the model from the body")
		}
		if r.DefaultModel != "" {
			v.warn(dp, "only header-routed mode reads it (routing.mode: headers); body mode reads the model from the body")
		}
		return
	}
	if r.ModelHeader != "" {
		if lower, ok := v.ownRequestHeader(hp, r.ModelHeader, "the model", RoutingModelHeader); ok {
			r.ModelHeader = lower
		}
	}
	if stringOr(r.ModelHeader, RoutingModelHeader) == stringOr(r.ClusterHeader, RoutingClusterHeader) {
		v.fail(hp, "the model header must differ from routing.clusterHeader (a client's value of it is removed)")
	}
	if r.DefaultModel == "" {
		return
	}
	if !validModelName(r.DefaultModel) {
		v.fail(dp, "model name must be 1 to "+strconv.Itoa(maxModelBytes)+" bytes, without spaces at the ends or control characters")
		return
	}
	ri, ok := v.routeServing(r.DefaultModel)
	switch {
	case !ok:
		v.fail(dp, "no route serves model "+v.quote(dp, r.DefaultModel))
	case passesModelOn(&v.p.Routes[ri]):
		v.warn(dp, "routes["+strconv.Itoa(ri)+"] has a target without a model: a request without "+
			stringOr(r.ModelHeader, RoutingModelHeader)+" whose body names another model than "+v.quote(dp, r.DefaultModel)+
			" is answered through a callout, not the route (give every target its model to keep them)")
	}
}

// routeServing returns the index of the route that serves model, as Resolved.Route picks
// it: the exact route, else the first glob route that matches.
func (v *validator) routeServing(model string) (int, bool) {
	for i := range v.p.Routes {
		if m := v.p.Routes[i].Model; m == model && !IsGlob(m) {
			return i, true
		}
	}
	for i := range v.p.Routes {
		r := &v.p.Routes[i]
		if !IsGlob(r.Model) {
			continue
		}
		if g, err := CompileGlob(r.Model); err == nil && g.Match(model) {
			return i, true
		}
	}
	return 0, false
}

// passesModelOn reports a route with a target that sends the requested model upstream
// unchanged (no model of its own).
func passesModelOn(r *Route) bool {
	for _, t := range r.Targets {
		if t.Model == "" {
			return true
		}
	}
	return false
}

func validRoutingMode(m RoutingMode) bool {
	for _, x := range RoutingModes {
		if m == x {
			return true
		}
	}
	return false
}

// routingPaths checks one API's path list; seen maps each path to where it was first
// listed, across both lists.
func (v *validator) routingPaths(path string, paths []string, seen map[string]string) {
	if len(paths) > maxRoutingPaths {
		v.fail(path, "at most "+strconv.Itoa(maxRoutingPaths)+" paths, got "+strconv.Itoa(len(paths)))
	}
	admin := stringOr(v.p.Admin.PathPrefix, AdminPathPrefix)
	for i, p := range paths {
		ip := joinIndex(path, i)
		switch {
		case !strings.HasPrefix(p, "/"):
			v.fail(ip, "path "+v.quote(ip, p)+" must start with '/'")
			continue
		case len(p) > maxRoutingPathBytes:
			v.fail(ip, "path is longer than "+strconv.Itoa(maxRoutingPathBytes)+" bytes")
			continue
		case strings.ContainsAny(p, "?#"):
			v.fail(ip, "path "+v.quote(ip, p)+" must not contain a query or fragment ('?' or '#'): the query string is ignored when matching")
			continue
		case hasControl(p) || strings.ContainsRune(p, ' '):
			v.fail(ip, "path must not contain spaces or control characters")
			continue
		case !isCanonicalPath(p):
			v.fail(ip, "path "+v.quote(ip, p)+" "+canonicalPathRule)
			continue
		case len(p) >= len(admin) && strings.EqualFold(p[:len(admin)], admin):
			// In any case: the filter answers 404 to a path under the prefix in another
			// case (README "Admin API").
			v.fail(ip, "path "+v.quote(ip, p)+" is under the admin API's prefix "+strconv.Quote(admin))
			continue
		}
		if prev, dup := seen[p]; dup {
			v.fail(ip, "duplicate path "+v.quote(ip, p)+" (also "+prev+"); a path belongs to one API")
			continue
		}
		seen[p] = ip
	}
}

// unroutedProviders warns about providers whose API has no routed paths: no request can
// ever reach them.
func (v *validator) unroutedProviders(r *Routing) {
	for i := range v.p.Providers {
		pr := &v.p.Providers[i]
		api := providerAPI(pr)
		if !validAPI(api) {
			continue // already reported
		}
		if paths := r.Paths.forAPI(api); paths != nil && len(paths) == 0 {
			v.warn(joinField(joinIndex("providers", i), "api"), "routing.paths."+string(api)+
				" is empty, so no request reaches this "+string(api)+" provider")
		}
	}
}

// forAPI returns the configured list of one API (nil = unset, the default applies).
func (p *RoutingPaths) forAPI(api API) []string {
	if api == APIAnthropic {
		return p.Anthropic
	}
	return p.OpenAI
}

// Offsets of real time zones run from UTC-12:00 to UTC+14:00.
const (
	minZoneOffset = -12 * 3600
	maxZoneOffset = 14 * 3600
)

// parseFixedZone reads resilience.quotaResetTimeZone: "UTC" or a fixed offset ±HH:MM.
func parseFixedZone(s string) (*time.Location, error) {
	if s == "UTC" || s == "" {
		return time.UTC, nil
	}
	if len(s) != 6 || (s[0] != '+' && s[0] != '-') || s[3] != ':' {
		return nil, errors.New("want UTC or a fixed offset ±HH:MM such as +08:00 (IANA names are not supported)")
	}
	hours, okH := twoDigits(s[1:3])
	minutes, okM := twoDigits(s[4:6])
	if !okH || !okM || minutes > 59 {
		return nil, errors.New("want UTC or a fixed offset ±HH:MM such as +08:00 (IANA names are not supported)")
	}
	offset := hours*3600 + minutes*60
	if s[0] == '-' {
		offset = -offset
	}
	if offset < minZoneOffset || offset > maxZoneOffset {
		return nil, errors.New("offset must be between -12:00 and +14:00")
	}
	if offset == 0 {
		return time.UTC, nil
	}
	return time.FixedZone(s, offset), nil
}

func twoDigits(s string) (int, bool) {
	if len(s) != 2 || s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9' {
		return 0, false
	}
	return int(s[0]-'0')*10 + int(s[1]-'0'), true
}
