package policies

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// richBase is a valid policy using most features; validation cases change one field.
const richBase = `{
 "providers":[
  {"id":"openai","profile":"apikey","cluster":"openai","authority":"api.openai.com",
   "quotaFamilies":{"gpt-5*":"gpt-5"},
   "connections":[
    {"id":"openai-a","credential":{"header":"Authorization","value":"Bearer k"},"maxConcurrent":2,
     "modelConcurrency":{"gpt-4o":1},"weight":2,"rateLimitOverrides":{"maxWaitMs":1000}},
    {"id":"openai-b"}]},
  {"id":"azure","profile":"oauth","cluster":"azure","connections":[{"id":"azure-a"}]}],
 "routes":[
  {"model":"gpt-4o","strategy":"weighted","targets":[{"provider":"openai","model":"gpt-4o","connection":"openai-a"},{"provider":"azure","weight":1}]},
  {"model":"claude-*","targets":[{"provider":"azure"}]}],
 "resilience":{
  "statusRestatement":[{"id":"r1","provider":"openai","fromStatuses":[403],"toStatus":429,"textMarkers":["quota"]}],
  "providerErrorRules":[{"id":"e1","provider":"openai","status":403,"reason":"auth_error","scope":"model","cooldownMs":1000}]},
 "admin":{"pathPrefix":"/admin/","token":"0123456789abcdef"}
}`

// remove marks a field to delete in set.
type remove struct{}

// mutate returns richBase with one dotted path ("providers.0.id") set to value.
func mutate(t *testing.T, path string, value any) string {
	t.Helper()
	return mutateDoc(t, richBase, path, value)
}

// mutateDoc returns doc with one dotted path set to value (remove{} deletes the field).
func mutateDoc(t *testing.T, doc, path string, value any) string {
	t.Helper()
	var root any
	if err := json.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(path, ".")
	cur := root
	for i, part := range parts {
		last := i == len(parts)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				if _, del := value.(remove); del {
					delete(c, part)
				} else {
					c[part] = value
				}
				break
			}
			next, ok := c[part]
			if !ok {
				next = map[string]any{}
				c[part] = next
			}
			cur = next
		case []any:
			idx, err := strconv.Atoi(part)
			if err != nil || idx >= len(c) {
				t.Fatalf("bad path %s at %s", path, part)
			}
			if last {
				c[idx] = value
				break
			}
			cur = c[idx]
		default:
			t.Fatalf("bad path %s at %s", path, part)
		}
	}
	out, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// manyRules makes n rules with rule.
func manyRules(n int, rule func(i int) map[string]any) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = rule(i)
	}
	return out
}

// manyMarkers makes n distinct markers of size bytes.
func manyMarkers(n, size int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = strings.Repeat(string(rune('a'+i)), size)
	}
	return out
}

func TestRichBaseIsValid(t *testing.T) {
	p := mustParse(t, richBase, ParseOptions{})
	if len(p.Warnings) != 0 {
		t.Errorf("warnings: %v", p.Warnings)
	}
}

func TestValidationRules(t *testing.T) {
	tests := []struct {
		name    string // the rule
		set     string // dotted path to change in richBase
		value   any    // new value (remove{} deletes the field)
		path    string // expected problem path
		message string // substring of the expected message
	}{
		// policy
		{"providers required", "providers", []any{}, "providers", "at least one provider"},
		{"routes required", "routes", remove{}, "routes", "at least one route"},
		{"body limit too small", "maxRequestBodyBytes", 10, "maxRequestBodyBytes", "between 1024 and 268435456"},
		{"body limit too large", "maxRequestBodyBytes", 1 << 30, "maxRequestBodyBytes", "between 1024"},
		// providers
		{"provider id required", "providers.0.id", "", "providers[0].id", "required"},
		{"provider id charset", "providers.0.id", "open ai", "providers[0].id", `invalid id "open ai"`},
		{"provider id leading punctuation", "providers.0.id", "-x", "providers[0].id", "invalid id"},
		{"provider id too long", "providers.0.id", strings.Repeat("a", 65), "providers[0].id", "invalid id"},
		{"provider id unique", "providers.1.id", "openai", "providers[1].id", `duplicate provider id "openai" (also providers[0]`},
		{"provider id unique ignoring case", "providers.1.id", "OpenAI", "providers[1].id", "ignoring case"},
		{"profile known", "providers.0.profile", "subscription", "providers[0].profile", `unknown profile "subscription" (want oauth, apikey or local)`},
		{"cluster required", "providers.0.cluster", "", "providers[0].cluster", "required"},
		{"cluster without spaces", "providers.0.cluster", "open ai", "providers[0].cluster", "must not contain spaces"},
		{"authority valid", "providers.0.authority", "https://api.openai.com/", "providers[0].authority", "invalid authority"},
		{"connections required", "providers.1.connections", []any{}, "providers[1].connections", "at least one connection"},
		{"quota family glob valid", "providers.0.quotaFamilies", map[string]any{"gpt-[5": "gpt-5"}, `providers[0].quotaFamilies["gpt-[5"]`, "invalid model glob"},
		{"quota family name", "providers.0.quotaFamilies", map[string]any{"gpt-5*": " "}, `providers[0].quotaFamilies["gpt-5*"]`, "model-like name"},
		{"quota family empty", "providers.0.quotaFamilies", map[string]any{"gpt-5*": ""}, `providers[0].quotaFamilies["gpt-5*"]`, "model-like name"},
		// connections
		{"connection id required", "providers.0.connections.1.id", "", "providers[0].connections[1].id", "required"},
		{"connection id unique across providers", "providers.1.connections.0.id", "openai-a", "providers[1].connections[0].id", "duplicate connection id \"openai-a\" (also providers[0].connections[0])"},
		{"connection id unique ignoring case", "providers.1.connections.0.id", "OPENAI-A", "providers[1].connections[0].id", "ignoring case"},
		{"credential header required", "providers.0.connections.0.credential.header", "", "providers[0].connections[0].credential.header", "required"},
		{"credential header token", "providers.0.connections.0.credential.header", "x api key", "providers[0].connections[0].credential.header", "invalid header name"},
		{"credential header not pseudo", "providers.0.connections.0.credential.header", ":authority", "providers[0].connections[0].credential.header", "invalid header name"},
		{"credential header not framing", "providers.0.connections.0.credential.header", "Content-Length", "providers[0].connections[0].credential.header", "cannot carry a credential"},
		{"credential header not host", "providers.0.connections.0.credential.header", "host", "providers[0].connections[0].credential.header", "cannot carry a credential"},
		{"credential header not session", "providers.0.connections.0.credential.header", "x-session-id", "providers[0].connections[0].credential.header", "cannot carry a credential"},
		{"credential header not spillway", "providers.0.connections.0.credential.header", "x-spillway-provider", "providers[0].connections[0].credential.header", "cannot carry a credential"},
		{"credential value required", "providers.0.connections.0.credential.value", "", "providers[0].connections[0].credential.value", "required"},
		{"credential value no newline", "providers.0.connections.0.credential.value", "Bearer k\n", "providers[0].connections[0].credential.value", "line break or control character"},
		{"credential value no padding", "providers.0.connections.0.credential.value", "Bearer k ", "providers[0].connections[0].credential.value", "leading or trailing whitespace"},
		{"credential required fields", "providers.0.connections.0.credential", map[string]any{}, "providers[0].connections[0].credential.header", "required"},
		{"maxConcurrent positive", "providers.0.connections.0.maxConcurrent", 0, "providers[0].connections[0].maxConcurrent", "omit it for no cap"},
		{"maxConcurrent bounded", "providers.0.connections.0.maxConcurrent", 100001, "providers[0].connections[0].maxConcurrent", "between 1 and 100000"},
		{"model cap positive", "providers.0.connections.0.modelConcurrency", map[string]any{"gpt-4o": 0}, `providers[0].connections[0].modelConcurrency["gpt-4o"]`, "between 1 and 100000"},
		{"model cap key", "providers.0.connections.0.modelConcurrency", map[string]any{"": 1}, `providers[0].connections[0].modelConcurrency[""]`, "model name must be 1 to 256 bytes"},
		{"connection weight range", "providers.0.connections.0.weight", -1, "providers[0].connections[0].weight", "between 0 and 1000"},
		// routes
		{"route model required", "routes.0.model", "", "routes[0].model", "required"},
		{"route glob valid", "routes.1.model", "claude-[", "routes[1].model", "invalid model glob: unclosed '['"},
		{"route model unique", "routes.1.model", "gpt-4o", "routes[1].model", `duplicate route for model "gpt-4o" (also routes[0])`},
		{"strategy known", "routes.0.strategy", "fastest", "routes[0].strategy", `unknown strategy "fastest" (want one of priority, weighted, round-robin, fill-first, random, strict-random, least-used, p2c)`},
		{"targets required", "routes.1.targets", []any{}, "routes[1].targets", "at least one target"},
		{"target provider required", "routes.1.targets.0", map[string]any{}, "routes[1].targets[0].provider", "required"},
		{"target provider known", "routes.1.targets.0", map[string]any{"provider": "azur"}, "routes[1].targets[0].provider", `unknown provider "azur"`},
		{"target connection known", "routes.0.targets.0.connection", "openai-z", "routes[0].targets[0].connection", `unknown connection "openai-z"`},
		{"target connection of provider", "routes.0.targets.0.connection", "azure-a", "routes[0].targets[0].connection", `belongs to provider "azure", not "openai"`},
		{"target model clean", "routes.0.targets.0.model", " gpt-4o", "routes[0].targets[0].model", "without spaces at the ends"},
		{"target model length", "routes.0.targets.0.model", strings.Repeat("m", 257), "routes[0].targets[0].model", "1 to 256 bytes"},
		{"route model length", "routes.1.model", strings.Repeat("m", 256) + "*", "routes[1].model", "longer than 256 bytes"},
		{"target weight range", "routes.0.targets.1.weight", 1001, "routes[0].targets[1].weight", "between 0 and 1000"},
		{"target unique", "routes.1.targets", []any{map[string]any{"provider": "azure"}, map[string]any{"provider": "azure"}}, "routes[1].targets[1]", "duplicate target (same as targets[0])"},
		{"weighted needs weight", "routes.0.targets", []any{map[string]any{"provider": "azure", "weight": 0}}, "routes[0].targets", "weight > 0"},
		// admin
		{"admin prefix slashes", "admin.pathPrefix", "admin", "admin.pathPrefix", "start and end with '/'"},
		{"admin prefix not root", "admin.pathPrefix", "/", "admin.pathPrefix", "shadow all traffic"},
		{"admin prefix plain", "admin.pathPrefix", "/a b/", "admin.pathPrefix", "plain path"},
		{"admin prefix ASCII", "admin.pathPrefix", "/\u00e4dmin/", "admin.pathPrefix", "canonical path"},
		{"admin prefix merged slashes", "admin.pathPrefix", "/a//b/", "admin.pathPrefix", "canonical path"},
		{"admin prefix dot segment", "admin.pathPrefix", "/a/./", "admin.pathPrefix", "canonical path"},
		{"admin prefix dot-dot segment", "admin.pathPrefix", "/x/../", "admin.pathPrefix", "canonical path"},
		{"admin prefix backslash", "admin.pathPrefix", `/a\b/`, "admin.pathPrefix", "canonical path"},
		{"admin token clean", "admin.token", "0123456789abcdef\n", "admin.token", "control character"},
		{"admin token without inner whitespace", "admin.token", "Bearer 0123456789abcdef", "admin.token", "whitespace"},
		// resilience: statuses
		{"trip status range", "resilience.providerBreaker.tripStatuses", []any{500, 600}, "resilience.providerBreaker.tripStatuses[1]", "between 100 and 599, got 600"},
		{"trip status is an error", "resilience.providerBreaker.tripStatuses", []any{302}, "resilience.providerBreaker.tripStatuses[0]", "not an error status"},
		{"trip status not account-level", "resilience.providerBreaker.tripStatuses", []any{500, 429}, "resilience.providerBreaker.tripStatuses[1]", "account-level"},
		{"trip status unique", "resilience.providerBreaker.tripStatuses", []any{500, 500}, "resilience.providerBreaker.tripStatuses[1]", "duplicate status 500"},
		{"lockout code range", "resilience.modelLockout.errorCodes", []any{99}, "resilience.modelLockout.errorCodes[0]", "between 100 and 599"},
		// resilience: breaker
		{"failure threshold positive", "resilience.providerBreaker.apikey.failureThreshold", 0, "resilience.providerBreaker.apikey.failureThreshold", "between 1 and"},
		{"degradation positive", "resilience.providerBreaker.oauth.degradationThreshold", 0, "resilience.providerBreaker.oauth.degradationThreshold", "between 1 and"},
		{"degradation within failure", "resilience.providerBreaker.oauth.degradationThreshold", 9, "resilience.providerBreaker.oauth.degradationThreshold", "must not exceed failureThreshold (8)"},
		{"reset timeout range", "resilience.providerBreaker.local.resetTimeoutMs", 999, "resilience.providerBreaker.local.resetTimeoutMs", "between 1 s and 24 h, got 999 ms"},
		{"cooldown kind known", "resilience.providerBreaker.local.cooldownByKind", map[string]any{"rate_limit": 5000}, `resilience.providerBreaker.local.cooldownByKind["rate_limit"]`, "unknown failure kind"},
		{"cooldown kind range", "resilience.providerBreaker.local.cooldownByKind", map[string]any{"timeout": 10}, `resilience.providerBreaker.local.cooldownByKind["timeout"]`, "between 1 s and 24 h"},
		{"backoff multiplier range", "resilience.providerBreaker.apikey.maxBackoffMultiplier", 0, "resilience.providerBreaker.apikey.maxBackoffMultiplier", "between 1 and 1024"},
		{"recovery successes range", "resilience.providerBreaker.apikey.recoverySuccesses", 0, "resilience.providerBreaker.apikey.recoverySuccesses", "between 1 and 1000"},
		// resilience: provider cooldown
		{"window threshold bounded", "resilience.providerCooldown.apikey.providerFailureThreshold", 1001, "resilience.providerCooldown.apikey.providerFailureThreshold", "between 1 and 1000"},
		{"window threshold positive", "resilience.providerCooldown.oauth.providerFailureThreshold", 0, "resilience.providerCooldown.oauth.providerFailureThreshold", "between 1 and"},
		{"window range", "resilience.providerCooldown.oauth.providerFailureWindowMs", 0, "resilience.providerCooldown.oauth.providerFailureWindowMs", "between 1 s and 24 h"},
		{"provider cooldown range", "resilience.providerCooldown.local.providerCooldownMs", 90000000, "resilience.providerCooldown.local.providerCooldownMs", "between 1 s and 24 h"},
		{"retry cooldown order", "resilience.providerCooldown.apikey", map[string]any{"minRetryCooldownMs": 5000, "maxRetryCooldownMs": 1000}, "resilience.providerCooldown.apikey.maxRetryCooldownMs", "must not be below minRetryCooldownMs (5 s)"},
		{"retry min above default max", "resilience.providerCooldown.apikey.minRetryCooldownMs", 300000, "resilience.providerCooldown.apikey.maxRetryCooldownMs", "must not be below minRetryCooldownMs (5 min), got 2 min"},
		// resilience: connection cooldown
		{"base cooldown positive", "resilience.connectionCooldown.apikey.baseCooldownMs", 0, "resilience.connectionCooldown.apikey.baseCooldownMs", "between 1 ms and 24 h"},
		{"connection max positive", "resilience.connectionCooldown.apikey.maxCooldownMs", 0, "resilience.connectionCooldown.apikey.maxCooldownMs", "between 1 ms and 24 h"},
		{"connection max below concurrency cooldown", "resilience.connectionCooldown", map[string]any{"concurrencyLimitCooldownMs": 5000, "oauth": map[string]any{"baseCooldownMs": 1, "maxCooldownMs": 2000}}, "resilience.connectionCooldown.oauth.maxCooldownMs", "must not be below concurrencyLimitCooldownMs (5 s)"},
		{"backoff steps range", "resilience.connectionCooldown.oauth.maxBackoffSteps", 31, "resilience.connectionCooldown.oauth.maxBackoffSteps", "between 0 and 30"},
		{"connection max below base", "resilience.connectionCooldown.apikey", map[string]any{"baseCooldownMs": 60000, "maxCooldownMs": 1000}, "resilience.connectionCooldown.apikey.maxCooldownMs", "must not be below baseCooldownMs (1 min)"},
		{"connection base above default max", "resilience.connectionCooldown.local.baseCooldownMs", 3600000, "resilience.connectionCooldown.local.maxCooldownMs", "must not be below baseCooldownMs (1 h), got 30 min"},
		{"concurrency cooldown range", "resilience.connectionCooldown.concurrencyLimitCooldownMs", 600001, "resilience.connectionCooldown.concurrencyLimitCooldownMs", "between 1 ms and 10 min"},
		{"concurrency cooldown positive", "resilience.connectionCooldown.concurrencyLimitCooldownMs", 0, "resilience.connectionCooldown.concurrencyLimitCooldownMs", "between 1 ms and 10 min"},
		{"expired retry range", "resilience.connectionCooldown.expiredRetryMax", 101, "resilience.connectionCooldown.expiredRetryMax", "between 1 and 100"},
		{"expired retry positive", "resilience.connectionCooldown.expiredRetryMax", 0, "resilience.connectionCooldown.expiredRetryMax", "between 1 and 100"},
		{"rejected streak range", "resilience.connectionCooldown.requestRejectedStreak", 0, "resilience.connectionCooldown.requestRejectedStreak", "between 1 and 100"},
		// resilience: combo wait, failover, affinity
		{"combo wait range", "resilience.comboCooldownWait.maxWaitMs", -5, "resilience.comboCooldownWait.maxWaitMs", "between 0 ms and 24 h"},
		{"combo attempts range", "resilience.comboCooldownWait.maxAttempts", 11, "resilience.comboCooldownWait.maxAttempts", "between 0 and 10"},
		{"combo budget range", "resilience.comboCooldownWait.budgetMs", 86400001, "resilience.comboCooldownWait.budgetMs", "between 0 ms and 24 h"},
		{"failover attempts range", "resilience.failover.maxAttempts", 0, "resilience.failover.maxAttempts", "between 1 and 20"},
		{"failover budget range", "resilience.failover.budgetMs", 10, "resilience.failover.budgetMs", "between 1 s and 24 h"},
		{"affinity ttl range", "resilience.sessionAffinityTtlMs", -1, "resilience.sessionAffinityTtlMs", "between 0 ms and 7 days"},
		// resilience: restatement rules
		{"restatement id required", "resilience.statusRestatement.0.id", "", "resilience.statusRestatement[0].id", "required"},
		{"restatement id unique", "resilience.statusRestatement", []any{
			map[string]any{"id": "r", "provider": "openai", "fromStatuses": []any{403}, "toStatus": 429},
			map[string]any{"id": "r", "provider": "openai", "fromStatuses": []any{400}, "toStatus": 429}},
			"resilience.statusRestatement[1].id", `duplicate rule id "r"`},
		{"restatement provider known", "resilience.statusRestatement.0.provider", "agentrouter", "resilience.statusRestatement[0].provider", `unknown provider "agentrouter"`},
		{"restatement from required", "resilience.statusRestatement.0.fromStatuses", []any{}, "resilience.statusRestatement[0].fromStatuses", "at least one status"},
		{"restatement to required", "resilience.statusRestatement.0.toStatus", remove{}, "resilience.statusRestatement[0].toStatus", "required"},
		{"restatement to range", "resilience.statusRestatement.0.toStatus", 700, "resilience.statusRestatement[0].toStatus", "between 400 and 599"},
		{"restatement to is an error", "resilience.statusRestatement.0.toStatus", 200, "resilience.statusRestatement[0].toStatus", "between 400 and 599"},
		{"restatement from is an error", "resilience.statusRestatement.0.fromStatuses", []any{200}, "resilience.statusRestatement[0].fromStatuses[0]", "not an error status"},
		{"restatement from is not to", "resilience.statusRestatement.0.fromStatuses", []any{403, 429}, "resilience.statusRestatement[0].fromStatuses[1]", "is the toStatus itself"},
		{"restatement from bounded", "resilience.statusRestatement.0.fromStatuses", []any{400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416}, "resilience.statusRestatement[0].fromStatuses", "at most 16 statuses"},
		{"restatement markers bounded", "resilience.statusRestatement.0.textMarkers", []any{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"}, "resilience.statusRestatement[0].textMarkers", "at most 16 markers"},
		{"restatement marker length", "resilience.statusRestatement.0.textMarkers", []any{strings.Repeat("x", 257)}, "resilience.statusRestatement[0].textMarkers[0]", "longer than 256 bytes"},
		{"restatement rules bounded", "resilience.statusRestatement", manyRules(33, func(i int) map[string]any {
			return map[string]any{"id": "r" + strconv.Itoa(i), "provider": "openai", "fromStatuses": []any{403}, "toStatus": 429}
		}), "resilience.statusRestatement", "at most 32 rules"},
		{"error rules bounded", "resilience.providerErrorRules", manyRules(65, func(i int) map[string]any {
			return map[string]any{"id": "e" + strconv.Itoa(i), "provider": "openai", "reason": "rate_limit"}
		}), "resilience.providerErrorRules", "at most 64 rules"},
		{"restatement marker non-empty", "resilience.statusRestatement.0.textMarkers", []any{""}, "resilience.statusRestatement[0].textMarkers[0]", "must not be empty"},
		{"restatement exclude non-empty", "resilience.statusRestatement.0.excludeMarkers", []any{"x", ""}, "resilience.statusRestatement[0].excludeMarkers[1]", "must not be empty"},
		{"restatement retry range", "resilience.statusRestatement.0.defaultRetryAfterMs", -1, "resilience.statusRestatement[0].defaultRetryAfterMs", "between 1 s and 24 h"},
		// resilience: error rules
		{"error rule provider known", "resilience.providerErrorRules.0.provider", "x", "resilience.providerErrorRules[0].provider", `unknown provider "x"`},
		{"error rule status range", "resilience.providerErrorRules.0.status", 42, "resilience.providerErrorRules[0].status", "between 400 and 599"},
		{"error rule status is an error", "resilience.providerErrorRules.0.status", 204, "resilience.providerErrorRules[0].status", "between 400 and 599"},
		{"error rule marker non-empty", "resilience.providerErrorRules.0.excludeMarkers", []any{""}, "resilience.providerErrorRules[0].excludeMarkers[0]", "must not be empty"},
		{"error rule reason required", "resilience.providerErrorRules.0.reason", remove{}, "resilience.providerErrorRules[0].reason", "required"},
		{"error rule reason known", "resilience.providerErrorRules.0.reason", "quota", "resilience.providerErrorRules[0].reason", `unknown reason "quota"`},
		{"error rule scope known", "resilience.providerErrorRules.0.scope", "account", "resilience.providerErrorRules[0].scope", `unknown scope "account"`},
		{"error rule cooldown range", "resilience.providerErrorRules.0.cooldownMs", 2592000001, "resilience.providerErrorRules[0].cooldownMs", "between 0 ms and 30 days"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseErrors(t, mutate(t, tt.set, tt.value), ParseOptions{})
			if !hasProblem(errs, tt.path, tt.message) {
				t.Errorf("want %s: ...%s..., got:\n%v", tt.path, tt.message, errs)
			}
		})
	}
}

func TestAcceptedEdgeValues(t *testing.T) {
	tests := []struct {
		name  string // what is accepted
		set   string // dotted path to change in richBase
		value any    // new value
	}{
		{"explicit empty trip statuses", "resilience.providerBreaker.tripStatuses", []any{}},
		{"1 ms base connection cooldown", "resilience.connectionCooldown.apikey.baseCooldownMs", 1},
		{"error rule without scope", "resilience.providerErrorRules.0.scope", remove{}},
		{"16 markers of 256 bytes", "resilience.statusRestatement.0.textMarkers", manyMarkers(16, 256)},
		{"degradation equals failure", "resilience.providerBreaker.oauth", map[string]any{"degradationThreshold": 3, "failureThreshold": 3}},
		{"lower failure threshold alone", "resilience.providerBreaker.apikey.failureThreshold", 2},
		{"zero weight connection", "providers.0.connections.0.weight", 0},
		{"credential header with tab-free value", "providers.0.connections.0.credential.value", "Bearer a\tb"},
		{"ipv6 authority", "providers.0.authority", "[::1]:8080"},
		{"glob with class and escape", "routes.1.model", `claude-[0-9]\*`},
		{"error rule without status", "resilience.providerErrorRules.0.status", remove{}},
		{"error rule without cooldown", "resilience.providerErrorRules.0.cooldownMs", remove{}},
		{"restatement without markers", "resilience.statusRestatement.0.textMarkers", remove{}},
		{"schema reference", "$schema", "./spillway.schema.json"},
		{"no admin token", "admin.token", remove{}},
		{"session ttl 7 days", "resilience.sessionAffinityTtlMs", 604800000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustParse(t, mutate(t, tt.set, tt.value), ParseOptions{})
		})
	}
}
