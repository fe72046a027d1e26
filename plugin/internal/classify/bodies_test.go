package classify

import "github.com/spillwayproxy/spillway/plugin/internal/testfixture"

// Upstream error bodies as the providers send them (ids and keys are made up).

// OpenAI.
const (
	openAITokensPerMin = `{
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-Xk2 on tokens per min (TPM): Limit 30000, Used 29755, Requested 1200. Please try again in 1.91s. Visit https://platform.openai.com/account/rate-limits to learn more.",
        "type": "tokens",
        "param": null,
        "code": "rate_limit_exceeded"
    }
}`
	openAIInsufficientQuota = `{
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
        "type": "insufficient_quota",
        "param": null,
        "code": "insufficient_quota"
    }
}`
	openAIInvalidKey       = `{"error":{"message":"Incorrect API key provided: sk-proj-****abcd. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
	openAIModelNotFound    = `{"error":{"message":"The model ` + "`gpt-5-turbo`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`
	openAIContextLength    = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	openAIBadParam         = `{"error":{"message":"Invalid value for 'temperature': expected a number between 0 and 2.","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`
	openAIServerError      = `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`
	openAIEngineOverloaded = `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`
	codexTokenExpired      = `{"error":{"message":"Provided authentication token is expired. Please try signing in again.","type":null,"code":"token_expired","param":null},"status":401}`
	codexUsageLimit        = testfixture.CodexUsageLimit
)

// Anthropic.
const (
	anthropicRateLimit      = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 50,000 input tokens per minute (org: 1a2b, model: claude-sonnet-4-5). For details, refer to: https://docs.claude.com/en/api/rate-limits."},"request_id":"req_011CU"}`
	anthropicOverloaded     = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CV"}`
	anthropicAPIError       = `{"type":"error","error":{"type":"api_error","message":"Internal server error"},"request_id":"req_011CW"}`
	anthropicCreditsLow     = `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},"request_id":"req_011CX"}`
	anthropicNotAllowed     = `{"type":"error","error":{"type":"permission_error","message":"Request not allowed"},"request_id":"req_011CY"}`
	anthropicOAuthExpired   = `{"type":"error","error":{"type":"authentication_error","message":"OAuth token has expired. Please obtain a new token or refresh your existing token."},"request_id":"req_011CZ"}`
	anthropicInvalidKey     = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_011Da"}`
	anthropicOrgDisabled    = `{"type":"error","error":{"type":"permission_error","message":"This organization has been disabled."},"request_id":"req_011Db"}`
	anthropicNotFound       = `{"type":"error","error":{"type":"not_found_error","message":"model: claude-opus-9"},"request_id":"req_011Dc"}`
	anthropicTooLarge       = `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."},"request_id":"req_011Dd"}`
	anthropicUsageLimit5h   = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's rate limit. Please try again later."},"request_id":"req_011De"}`
	anthropicModelNotFound4 = `{"type":"error","error":{"type":"invalid_request_error","message":"model: claude-3-opus-latest is not supported"}}`
)

// Google (Gemini API).
const (
	geminiPerMinute = testfixture.GeminiPerMinute429
	geminiPerDay    = `{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 250, model: gemini-2.5-flash",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaValue": "250"}]},
      {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "72000s"}
    ]
  }
}`
	geminiBadKey   = `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}]}}`
	geminiOverload = `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`
	geminiInternal = `{"error":{"code":500,"message":"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting","status":"INTERNAL"}}`
)

// GLM / Zhipu (open.bigmodel.cn, z.ai).
const (
	glmConcurrency        = `{"error":{"code":"1302","message":"您当前使用该API的并发数过高，请降低并发，或联系客服增加限额。"}}`
	glmConcurrencyEscaped = `{"error":{"code":"1302","message":"\u60a8\u5f53\u524d\u4f7f\u7528\u8be5API\u7684\u5e76\u53d1\u6570\u8fc7\u9ad8\uff0c\u8bf7\u964d\u4f4e\u5e76\u53d1\uff0c\u6216\u8054\u7cfb\u5ba2\u670d\u589e\u52a0\u9650\u989d\u3002"}}`
	glmBalance            = `{"error":{"code":"1113","message":"余额不足或无可用资源包,请充值。"}}`
	glmTooManyRequests    = `{"error":{"code":"1305","message":"当前API请求过多，请稍后重试。"}}`
	glmFiveHourCap        = `{"error":{"code":"1308","message":"已达到 5 小时的使用上限。您的限额将在 2025-09-10 19:01:19 重置。"}}`
	glmConcurrencyAndCap  = `{"error":{"code":"1302","message":"并发数过高；另外您已达到每日使用上限。"}}`
	glmBanned             = `{"error":{"code":"1121","message":"您的账号因违规已被封禁，请联系客服。"}}`
)

// agentrouter.org (a new-api gateway).
const (
	agentrouterUserQuota  = `{"error":{"message":"用户额度不足, 剩余额度: ＄0.000000","type":"new_api_error","param":"","code":"insufficient_user_quota"}}`
	agentrouterNoModel    = `{"error":{"message":"该令牌无权访问模型 claude-opus-4-1-20250805","type":"new_api_error","param":"","code":null}}`
	agentrouterBadToken   = `{"error":{"message":"无效的令牌","type":"new_api_error","param":"","code":null}}`
	openRouterNoCredits   = `{"error":{"message":"Insufficient credits. Add more using https://openrouter.ai/settings/credits","code":402}}`
	groqTokensPerDay      = `{"error":{"message":"Rate limit reached for model ` + "`llama-3.3-70b-versatile`" + ` in organization ` + "`org_01j`" + ` service tier ` + "`on_demand`" + ` on tokens per day (TPD): Limit 100000, Used 99862, Requested 1164. Please try again in 14m46.56s. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing","type":"tokens","code":"rate_limit_exceeded"}}`
	mistralDailyLimit     = `{"object":"error","message":"You have exceeded your daily request limit.","type":"rate_limited","param":null,"code":"1300"}`
	plainConcurrency      = `{"detail":"Too many concurrent requests for this account, please retry later."}`
	cloudflareBadGateway  = `<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>cloudflare</center></body></html>`
	deepseekBalance       = `{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}`
	suspendedAccountPlain = `Your account has been suspended. Contact support.`
)
