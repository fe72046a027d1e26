package llmapi

// CredentialHeaders are the request headers that carry a client's credentials to an LLM
// API: OpenAI and most gateways use authorization, Anthropic x-api-key, Azure OpenAI
// api-key, Google x-goog-api-key. Spillway removes every one of them from a routed request
// and sets the chosen connection's own, so a client's key never reaches a provider and a
// provider's key never depends on the client.
var CredentialHeaders = [...]string{"authorization", "x-api-key", "api-key", "x-goog-api-key"}

// IsCredentialHeader reports whether the lower-case header name carries a credential.
func IsCredentialHeader(name string) bool {
	for _, h := range CredentialHeaders {
		if name == h {
			return true
		}
	}
	return false
}

// hopByHop are the connection-level headers a proxy never forwards (RFC 9110 §7.6.1), plus
// the framing headers a re-sent body gets anew.
var hopByHop = [...]string{"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
	"proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "content-length"}

// IsHopByHop reports whether the lower-case header name must not be copied onto a request
// Spillway sends itself (a failover attempt).
func IsHopByHop(name string) bool {
	for _, h := range hopByHop {
		if name == h {
			return true
		}
	}
	return false
}
