package classify

import "strings"

// A signal is a set of fragments that must all occur in the error text, in any order. The
// text is folded to lower case first and fragments are written in lower case (a test
// checks), so ASCII matches case-insensitively and other bytes exactly. Lists are kept to
// wording that names the condition: generic words alone ("limit", "quota") never decide,
// and the quota and credit lists are whole phrases only (one fragment each), because
// quota words in any order occur in per-minute rate limits too.
type signal []string

// folded is an error text prepared for signal matching: folded to lower case, with a
// trigram filter so that most fragments are ruled out without scanning the text. A body has
// at most a few thousand distinct byte triples; a fragment is scanned for only when every one
// of its triples occurs, which keeps classification near one pass over the text however many
// signals there are (an absent phrase of ordinary English almost always has a triple the
// text lacks, where a bigram filter let most of them through).
type folded struct {
	text    string
	triples [128]uint64 // 8192-bit set of hashed byte triples present in text
}

// newFolded indexes text. It returns a value: storing text through a pointer would make
// escape analysis move the caller's stack buffer to the heap.
func newFolded(text string) folded {
	f := folded{text: text}
	for i := 0; i+2 < len(text); i++ {
		h := tripleHash(text[i], text[i+1], text[i+2])
		f.triples[h>>6] |= 1 << (h & 63)
	}
	return f
}

// tripleHash maps a byte triple into 0..8191 (Fibonacci hashing of the packed bytes).
func tripleHash(a, b, c byte) uint {
	return uint((uint32(a) | uint32(b)<<8 | uint32(c)<<16) * 2654435761 >> 19)
}

// contains reports whether fragment occurs in the text.
func (f *folded) contains(fragment string) bool {
	for i := 0; i+2 < len(fragment); i++ {
		h := tripleHash(fragment[i], fragment[i+1], fragment[i+2])
		if f.triples[h>>6]&(1<<(h&63)) == 0 {
			return false
		}
	}
	return strings.Contains(f.text, fragment)
}

// anyOf reports whether the text shows any of the signals.
func (f *folded) anyOf(signals []signal) bool {
	for _, s := range signals {
		if f.all(s) {
			return true
		}
	}
	return false
}

func (f *folded) all(s signal) bool {
	for _, fragment := range s {
		if !f.contains(fragment) {
			return false
		}
	}
	return len(s) > 0
}

// banSignals say the account is banned, deactivated or suspended (BAN_DETECTION): terminal.
var banSignals = []signal{
	{"account_deactivated"},
	{"account has been deactivated"}, {"account is deactivated"},
	{"account has been disabled"}, {"account is disabled"},
	{"account has been suspended"}, {"account is suspended"},
	{"account has been banned"}, {"account is banned"}, {"account was banned"},
	{"organization has been disabled"}, {"organization has been deactivated"}, {"organization has been suspended"},
	{"has been disabled in this account for violation"},
	{"封禁"},                 // banned
	{"账号已被禁用"}, {"账户已被禁用"}, // account disabled
	{"账号已停用"}, {"账户已停用"}, // account deactivated
}

// creditSignals say the account's prepaid credits, balance or free tier are gone
// (CREDITS_EXHAUSTED_SIGNALS): terminal until someone pays. Generic quota wording is not
// here: Gemini's transient per-minute 429 says "You exceeded your current quota" too, and
// its "Resource has been exhausted (e.g. check quota)" is a rate limit, which is why the
// free-tier phrases below all name the tier, the free quota or the credits.
var creditSignals = []signal{
	{"insufficient_quota"}, // OpenAI: no credits / billing limit
	{"billing_hard_limit_reached"}, {"billing hard limit"},
	{"credit balance is too low"}, {"credit_balance_too_low"}, // Anthropic
	{"credits exhausted"}, {"credits have been exhausted"}, {"out of credits"}, {"out of free credits"},
	{"insufficient credit"},        // "insufficient credits", "insufficient credit balance"
	{"used all available credits"}, // xAI: "used all available credits or reached its monthly spending limit"
	{"monthly included credits"},   // Hugging Face Inference Providers: "exceeded your monthly included credits"
	{"insufficient balance"}, {"insufficient_balance"}, {"insufficient account balance"},
	{"insufficient funds"},
	{"payment required"}, // a 402's reason phrase, in any status's body (OmniRoute 3.7.9 CREDITS_EXHAUSTED_SIGNALS)
	// Exhausted free tiers (Alibaba Model Studio AllocationQuota.FreeTierOnly "The free tier
	// of the model has been exhausted", AllocationQuota.FreeAllocatedQuotaExceeded "Free
	// allocated quota exceeded", and the other providers' wordings of the same).
	{"tier has been exhausted"}, {"free tier is exhausted"}, {"free tier exhausted"},
	{"free tier of the model has been exhausted"}, // Alibaba's own text (OmniRoute 3.7.9 CREDITS_EXHAUSTED_SIGNALS)
	{"exhausted your free tier"}, {"exhausted the free tier"},
	{"free tier quota has been exhausted"}, {"free tier quota is exhausted"}, {"free tier quota exhausted"},
	{"freetieronly"}, {"free allocated quota exceeded"}, {"freeallocatedquotaexceeded"},
	{"free quota has been exhausted"}, {"free quota is exhausted"}, {"free quota exhausted"},
	{"exhausted your free quota"}, {"free quota has been used up"}, {"used up your free quota"},
	{"free credits have been exhausted"}, {"free credits exhausted"}, {"used all your free credits"},
	{"free trial has ended"}, {"free trial has expired"},
	{"insufficient_g1_credits_balance"},
	{"免费额度已用完"}, {"免费额度已用尽"}, {"免费额度已耗尽"}, {"免费额度不足"}, // free quota used up / insufficient
	{"余额不足"}, // GLM 1113 "余额不足或无可用资源包"
	{"欠费"},   // "您的账户已欠费" (account in arrears)
}

// dailyQuotaSignals say a daily quota is exhausted: quota_exhausted until the provider's
// reset, midnight when it announces none (guide §4), unless the upstream's own hint says
// the wait is short. Phrases, never words in any order.
var dailyQuotaSignals = []signal{
	{"daily limit"}, {"daily request limit"}, {"daily token limit"}, {"daily usage limit"},
	// "daily rate limit exceeded" names a daily cap (OmniRoute 3.7.9 classify429: /daily.*limit/).
	{"daily rate limit"},
	{"daily quota"}, {"daily free allocation"}, // Cloudflare Workers AI neurons
	{"per day"}, {"per-day"}, {"perday"}, // Groq "tokens per day (TPD)", OpenRouter "free-models-per-day", Gemini quotaId "...PerDay..."
	{"tpd rate limit"}, {"today's quota"}, {"try again tomorrow"},
	{"今日额度"}, {"每日额度"}, {"当日额度"}, {"每日使用上限"}, // today's / daily quota
}

// quotaSignals say another long-period cap or subscription window was hit (weekly,
// monthly, the 5-hour session, plan usage): quota_exhausted, unless the upstream's own
// hint says the wait is short. Phrases, never words in any order: "organization quota
// exceeded" from a gateway, or Gemini's "Resource has been exhausted (e.g. check quota)",
// are per-minute rate limits.
var quotaSignals = []signal{
	{"weekly quota"},
	{"monthly limit"}, {"monthly request limit"}, {"monthly usage limit"}, {"monthly quota"}, {"per month"},
	{"quota has been exhausted"}, {"quota is exhausted"}, {"quota exhausted"},
	{"exhausted your quota"}, {"exhausted their quota"}, {"quota has been used up"},
	{"plan limit"}, {"plan quota"}, {"billing cap"},
	{"individual quota reached"}, {"enable overages"}, // Cloud Code individual quota
	{"额度不足"},             // quota insufficient (agentrouter, usually via its rule)
	{"额度已用尽"}, {"额度已用完"}, // quota used up (Kimi, Qwen)
	{"使用上限"}, {"调用上限"}, // usage / call cap reached (GLM 1308/1310, MiniMax)
	{"限额将在"}, // "your limit will reset at ..." (GLM)
}

// subscriptionSignals are subscription usage-limit texts (isSubscriptionQuotaText, the
// weekly and session caps): quota_exhausted whatever the upstream hint, cooling for the
// announced reset or, without one, the guide's long quota-text cooldown — never the base
// backoff (guide §7 "Lock op basis van egress-buckets": buildSubscriptionQuotaFallback).
var subscriptionSignals = []signal{
	{"usage limit reached"}, {"usage limit has been reached"}, {"usage_limit_reached"},
	{"reached your usage limit"}, {"claude pro usage limit"},
	{"weekly limit"}, {"weekly usage limit"}, {"reached your weekly"},
	{"session usage limit"}, {"session limit reached"}, {"reached your session"},
}

// quotaWordSignals are generic quota words. Alone they decide nothing; with an upstream
// hint of at least QuotaScaleHint they are quota exhaustion (Gemini's per-day 429 says
// "You exceeded your current quota" with retryDelay "86399s").
var quotaWordSignals = []signal{{"quota"}, {"resource_exhausted"}, {"resource has been exhausted"}}

// concurrencySignals say the account is healthy but busy: concurrency_limited.
var concurrencySignals = []signal{
	{"concurrent request"}, {"too many concurrent"}, {"concurrency limit"}, {"concurrency_limit"},
	{"concurrency", "exceeded"}, {"parallel request"}, {"max concurrency"}, {"maximum concurrency"},
	{"并发"}, // GLM 1302 "您当前使用该API的并发数过高"
}

// routeDeniedSignals, on a 403, say the key is valid but may not call this route (Fireworks
// Fire Pass keys: "Fire Pass API keys are not authorized for this route."): the request's
// own route, answered as it is, with nothing cooled (OmniRoute 3.7.9 checkFallbackError,
// #2929).
var routeDeniedSignals = []signal{{"not authorized for this route"}}

// projectSetupSignals, on a 403, say the account's project is not set up for the API
// (Google: "Generative Language API has not been used in project 123 before or it is
// disabled"): not the key's fault, so the connection stays active (OmniRoute 3.7.9
// checkFallbackError leaves such a 403 out of its auth-error branch).
var projectSetupSignals = []signal{{"has not been used in project"}}

// expiredSignals, on a 401, say the credential expired (not that it is wrong).
var expiredSignals = []signal{{"expired"}, {"过期"}}

// requestRejectedSignals, on an OAuth 403, are Anthropic's per-request refusal.
var requestRejectedSignals = []signal{{"request not allowed"}}

// capacitySignals, on a 5xx, say the model is overloaded rather than broken.
var capacitySignals = []signal{
	{"overloaded"}, {"capacity"}, {"server is busy"}, {"服务繁忙"}, {"负载已饱和"},
}

// credentialSignals, on a 400, say the credential is bad (Google answers an invalid API key
// with 400 INVALID_ARGUMENT / API_KEY_INVALID).
var credentialSignals = []signal{
	{"api_key_invalid"}, {"api key not valid"}, {"invalid api key"}, {"invalid_api_key"},
	{"incorrect api key"}, {"api key", "expired"}, {"authentication", "failed"},
}

// rateLimitSignals, on a 400, are throttling reported with the wrong status (MiMo and
// GLM: "Detected high-frequency non-compliant requests from you"; RATE_LIMIT_TEXT_PATTERNS).
var rateLimitSignals = []signal{
	{"rate limit"}, {"rate_limit"}, {"too many requests"},
	{"high-frequency"}, {"high frequency"}, {"non-compliant"}, {"noncompliant"},
	{"频繁"}, {"频率"},
}

// modelMissingSignals, on a 400, 404 or 410, say the model does not exist, was retired
// or is not served.
var modelMissingSignals = []signal{
	{"model_not_found"}, {"deployment_not_found"}, {"model", "not found"}, {"model", "does not exist"},
	{"invalid model"}, {"unsupported model"}, {"model", "not supported"},
	{"model", "no longer available"}, {"model", "end of life"}, {"模型不存在"},
}

// contextOverflowSignals, on a 400, say the prompt does not fit this model's window:
// another target may have a larger one.
var contextOverflowSignals = []signal{
	{"context_length_exceeded"}, {"context length"}, {"context window"}, {"maximum context"},
	{"prompt is too long"}, {"input is too long"}, {"too many tokens"}, {"tokens exceed"},
}
