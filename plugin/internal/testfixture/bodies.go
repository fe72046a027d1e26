package testfixture

// Upstream error bodies that more than one package's tests read, as the providers send them
// (ids and keys are made up).
const (
	// GeminiPerMinute429 is Gemini's per-minute throttle: quota wording, and a typed
	// RetryInfo of 38 s that says it is a rate limit.
	GeminiPerMinute429 = `{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10, model: gemini-2.0-flash\nPlease retry in 38.922534355s.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"}, "quotaValue": "10"}]},
      {"@type": "type.googleapis.com/google.rpc.Help", "links": [{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
      {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "38s"}
    ]
  }
}`
	// CodexUsageLimit is Codex's plan usage limit, with the reset it announces in seconds.
	CodexUsageLimit = `{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"plus","resets_in_seconds":5400}}`
)
