package recheck

import "github.com/spillwayproxy/spillway/policies"

// The check is the cheapest request that proves a credential: listing the provider's models,
// which needs a valid key and costs no tokens. OpenAI's API lists them at GET /v1/models
// (platform.openai.com, API reference "Models: List models"), as OpenAI-compatible gateways
// do; Anthropic's at GET /v1/models with the anthropic-version header every request of its
// API carries (docs.anthropic.com, "List Models" and "Versions": 2023-06-01 is the current
// version, the one Anthropic's SDKs send). The connection's own credential header goes with
// it, as on every request sent through the connection.
const (
	// ModelsPath is the path of the check, for both APIs.
	ModelsPath = "/v1/models"
	// AnthropicVersion is the anthropic-version header of a check of an anthropic provider.
	AnthropicVersion = "2023-06-01"
)

// ExtraHeaders are the headers a check of a provider of api carries besides :method, :path,
// :authority, accept and the credential.
func ExtraHeaders(api policies.API) [][2]string {
	if api == policies.APIAnthropic {
		return [][2]string{{"anthropic-version", AnthropicVersion}}
	}
	return nil
}

// Answer is what a check's response says about the credential.
type Answer int

// Answers.
const (
	// Inconclusive: a 5xx, a 429, another 4xx, a timeout or no response says nothing about
	// the credential; nothing changes.
	Inconclusive Answer = iota
	// Passed: a 2xx; the credential works again and the expired state is cleared.
	Passed
	// Refused: a 401 or 403; the credential is still rejected, the state stays expired and
	// the next check backs off.
	Refused
)

// AnswerOf classifies a check's response status (0: no response).
func AnswerOf(status int) Answer {
	switch {
	case status >= 200 && status < 300:
		return Passed
	case status == 401 || status == 403:
		return Refused
	}
	return Inconclusive
}
