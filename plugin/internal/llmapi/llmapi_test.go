package llmapi

import "testing"

func TestCredentialAndHopByHopHeaders(t *testing.T) {
	for _, h := range []string{"authorization", "x-api-key", "api-key", "x-goog-api-key"} {
		if !IsCredentialHeader(h) {
			t.Errorf("%s is not treated as a credential header", h)
		}
	}
	for _, h := range []string{"content-type", "anthropic-version", "openai-organization"} {
		if IsCredentialHeader(h) {
			t.Errorf("%s is treated as a credential header", h)
		}
	}
	for _, h := range []string{"connection", "transfer-encoding", "content-length", "upgrade"} {
		if !IsHopByHop(h) {
			t.Errorf("%s is not treated as hop-by-hop", h)
		}
	}
	if IsHopByHop("accept") {
		t.Error("accept is treated as hop-by-hop")
	}
}
