package fakeprovider

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"time"
)

// Embedding sizes the fake accepts in "dimensions".
const (
	defaultEmbeddingDims = 8
	maxEmbeddingDims     = 4096
)

// badRequest is a validation failure: the field it is about and what is wrong.
type badRequest struct{ param, msg string }

func (e *badRequest) Error() string { return e.msg }

// decode reads body strictly enough to catch malformed JSON and wrong types, leniently
// enough to accept every field the real APIs accept (unknown fields are ignored).
func decode(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return &badRequest{msg: "the request body is empty: send a JSON object"}
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &badRequest{param: te.Field, msg: fmt.Sprintf("invalid type for %q: expected %s", te.Field, te.Type)}
		}
		return &badRequest{msg: "we could not parse the JSON body of your request: " + err.Error()}
	}
	return nil
}

// fail answers a decode or validation error in the provider's shape.
func (p *Provider) fail(w http.ResponseWriter, err error) {
	var br *badRequest
	if errors.As(err, &br) {
		p.writeError(w, http.StatusBadRequest, br.param, br.msg)
		return
	}
	p.writeError(w, http.StatusBadRequest, "", err.Error())
}

// accept is how every endpoint with a body starts: decode it into a new R and validate it
// with check; a decode or validation failure is answered in the provider's shape, and
// accept reports false.
func accept[R any](c *call, check func(*R) error) (*R, bool) {
	req := new(R)
	err := decode(c.body, req)
	if err == nil {
		err = check(req)
	}
	if err != nil {
		c.p.fail(c.w, err)
		return nil, false
	}
	return req, true
}

// generate is how every generation endpoint answers: the fake's reply text for model, as
// the API's event stream (from newStreamer) when the request asked for a stream, else as
// the one JSON object that object builds around it.
func (c *call) generate(model string, stream bool, newStreamer func(text string) streamer, object func(text string) any) {
	text := c.p.reply(model)
	if stream {
		c.stream(newStreamer(text), text)
		return
	}
	writeJSON(c.w, http.StatusOK, object(text))
}

func required(param string) error {
	return &badRequest{param: param, msg: fmt.Sprintf("missing required parameter: %q", param)}
}

// tokens estimates a token count the way people do by hand: about four bytes a token.
func tokens(b []byte) int { return max(1, (len(bytes.TrimSpace(b))+3)/4) }

func (p *Provider) reply(model string) string {
	return fmt.Sprintf("Hello from %s, the hostsim fake %s provider, answering as %s.", p.name, p.kind, model)
}

func (p *Provider) id(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, p.name, p.seq.Add(1))
}

// chatRequest is what the fake reads of a chat completion request.
type chatRequest struct {
	Model         string            `json:"model"`
	Messages      []json.RawMessage `json:"messages"`
	Stream        bool              `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (r *chatRequest) check() error {
	switch {
	case r.Model == "":
		return required("model")
	case len(r.Messages) == 0:
		return &badRequest{param: "messages", msg: "messages must be a non-empty array"}
	}
	return nil
}

// chatCompletion answers POST /v1/chat/completions.
func (p *Provider) chatCompletion(c *call) {
	req, ok := accept(c, (*chatRequest).check)
	if !ok {
		return
	}
	prompt := tokens(bytes.Join(rawBytes(req.Messages), nil))
	c.generate(req.Model, req.Stream, func(text string) streamer {
		return &chatStreamer{id: p.id("chatcmpl"), created: time.Now().Unix(), model: req.Model,
			includeUsage: req.StreamOptions.IncludeUsage, prompt: prompt, completion: tokens([]byte(text))}
	}, func(text string) any {
		return map[string]any{
			"id":                 p.id("chatcmpl"),
			"object":             "chat.completion",
			"created":            time.Now().Unix(),
			"model":              req.Model,
			"system_fingerprint": "fp_hostsim_fake",
			"choices": []any{map[string]any{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": text, "refusal": nil},
				"logprobs":      nil,
				"finish_reason": "stop",
			}},
			"usage": openAIUsage(prompt, tokens([]byte(text))),
		}
	})
}

func openAIUsage(prompt, completion int) map[string]any {
	return map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
}

func rawBytes(msgs []json.RawMessage) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m
	}
	return out
}

// completionRequest is what the fake reads of a (legacy) completion request.
type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	Stream bool            `json:"stream"`
}

func (r *completionRequest) check() error {
	switch {
	case r.Model == "":
		return required("model")
	case isNull(r.Prompt):
		return required("prompt")
	}
	return nil
}

// completion answers POST /v1/completions.
func (p *Provider) completion(c *call) {
	req, ok := accept(c, (*completionRequest).check)
	if !ok {
		return
	}
	c.generate(req.Model, req.Stream, func(string) streamer {
		return &completionStreamer{id: p.id("cmpl"), created: time.Now().Unix(), model: req.Model}
	}, func(text string) any {
		return map[string]any{
			"id":      p.id("cmpl"),
			"object":  "text_completion",
			"created": time.Now().Unix(),
			"model":   req.Model,
			"choices": []any{map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": "stop"}},
			"usage":   openAIUsage(tokens(req.Prompt), tokens([]byte(text))),
		}
	})
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// embeddingInputs reads "input": a string, a list of strings, a list of token ids, or a
// list of lists of token ids. Each element is returned as the bytes that seed its vector.
func embeddingInputs(raw json.RawMessage) ([][]byte, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, &badRequest{param: "input", msg: "input must not be empty"}
		}
		return [][]byte{[]byte(one)}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil && len(many) > 0 {
		out := make([][]byte, len(many))
		for i, s := range many {
			out[i] = []byte(s)
		}
		return out, nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]byte{raw}, nil
	}
	var lists [][]int64
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		out := make([][]byte, len(lists))
		for i, l := range lists {
			out[i], _ = json.Marshal(l)
		}
		return out, nil
	}
	return nil, &badRequest{param: "input", msg: "input must be a non-empty string, array of strings, or array of token arrays"}
}

// embeddingRequest is what the fake reads of an embeddings request; inputs are its
// "input" elements, read by check.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     *int            `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
	inputs         [][]byte
}

func (r *embeddingRequest) check() (err error) {
	switch {
	case r.Model == "":
		return required("model")
	case isNull(r.Input):
		return required("input")
	case r.Dimensions != nil && (*r.Dimensions < 1 || *r.Dimensions > maxEmbeddingDims):
		return &badRequest{param: "dimensions", msg: fmt.Sprintf("dimensions must be 1-%d", maxEmbeddingDims)}
	case r.EncodingFormat != "" && r.EncodingFormat != "float" && r.EncodingFormat != "base64":
		return &badRequest{param: "encoding_format", msg: `encoding_format must be "float" or "base64"`}
	}
	r.inputs, err = embeddingInputs(r.Input)
	return err
}

// embeddings answers POST /v1/embeddings with deterministic unit vectors.
func (p *Provider) embeddings(c *call) {
	req, ok := accept(c, (*embeddingRequest).check)
	if !ok {
		return
	}
	dims := defaultEmbeddingDims
	if req.Dimensions != nil {
		dims = *req.Dimensions
	}
	data := make([]any, len(req.inputs))
	prompt := 0
	for i, in := range req.inputs {
		vec := embedding(in, dims)
		prompt += tokens(in)
		var encoded any = vec
		if req.EncodingFormat == "base64" {
			encoded = base64Floats(vec)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": encoded}
	}
	writeJSON(c.w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   data,
		"model":  req.Model,
		"usage":  map[string]any{"prompt_tokens": prompt, "total_tokens": prompt},
	})
}

// embedding derives a unit vector of dims components from seed (same seed, same vector).
func embedding(seed []byte, dims int) []float32 {
	h := fnv.New64a()
	_, _ = h.Write(seed)
	x := h.Sum64() | 1
	vec := make([]float32, dims)
	var norm float64
	for i := range vec {
		// xorshift64: a cheap deterministic sequence.
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v := float64(x>>11)/float64(1<<53)*2 - 1
		vec[i] = float32(v)
		norm += v * v
	}
	if norm = math.Sqrt(norm); norm > 0 {
		for i := range vec {
			vec[i] = float32(float64(vec[i]) / norm)
		}
	}
	return vec
}

// base64Floats encodes a vector as OpenAI does for encoding_format=base64: little-endian
// float32s, base64.
func base64Floats(vec []float32) string {
	b := make([]byte, 4*len(vec))
	for i, v := range vec {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// responseRequest is what the fake reads of a Responses API request.
type responseRequest struct {
	Model  string          `json:"model"`
	Input  json.RawMessage `json:"input"`
	Stream bool            `json:"stream"`
}

func (r *responseRequest) check() error {
	switch {
	case r.Model == "":
		return required("model")
	case isNull(r.Input):
		return required("input")
	}
	return nil
}

// response answers POST /v1/responses.
func (p *Provider) response(c *call) {
	req, ok := accept(c, (*responseRequest).check)
	if !ok {
		return
	}
	// One response object, whichever form it takes: its ids are drawn once.
	r := &responseObject{id: p.id("resp"), msgID: p.id("msg"), created: time.Now().Unix(), model: req.Model,
		in: tokens(req.Input)}
	c.generate(req.Model, req.Stream, func(text string) streamer {
		r.out = tokens([]byte(text))
		return &responsesStreamer{resp: r}
	}, func(text string) any {
		r.out = tokens([]byte(text))
		return r.object("completed", text, nil)
	})
}

// responseObject is a Responses API response, in its JSON and stream forms.
type responseObject struct {
	id, msgID string
	created   int64
	model     string
	in, out   int
}

// message is the output message item; text "" with status in_progress while streaming.
func (r *responseObject) message(status, text string, withContent bool) map[string]any {
	content := []any{}
	if withContent {
		content = []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}
	}
	return map[string]any{"type": "message", "id": r.msgID, "status": status, "role": "assistant", "content": content}
}

// object is the response object with the given status; errObj is its error (failed).
func (r *responseObject) object(status, text string, errObj any) map[string]any {
	output := []any{}
	var usage any
	if status == "completed" {
		output = []any{r.message("completed", text, true)}
		usage = map[string]any{
			"input_tokens":          r.in,
			"input_tokens_details":  map[string]any{"cached_tokens": 0},
			"output_tokens":         r.out,
			"output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens":          r.in + r.out,
		}
	}
	return map[string]any{
		"id":                  r.id,
		"object":              "response",
		"created_at":          r.created,
		"status":              status,
		"model":               r.model,
		"error":               errObj,
		"incomplete_details":  nil,
		"instructions":        nil,
		"parallel_tool_calls": true,
		"tool_choice":         "auto",
		"tools":               []any{},
		"output":              output,
		"usage":               usage,
	}
}

// fakeModels are the models the fakes list (any other model is served too).
var fakeModels = map[Kind][]string{
	OpenAI:    {"gpt-4o", "gpt-4o-mini", "text-embedding-3-small"},
	Anthropic: {"claude-sonnet-4", "claude-haiku-4"},
}

// openAIModels answers GET /v1/models.
func (p *Provider) openAIModels(c *call) {
	w := c.w
	data := make([]any, 0, len(fakeModels[OpenAI]))
	for _, m := range fakeModels[OpenAI] {
		data = append(data, map[string]any{"id": m, "object": "model", "created": 1700000000, "owned_by": "hostsim-fake"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// anthropicModels answers GET /v1/models in Anthropic's shape.
func (p *Provider) anthropicModels(c *call) {
	w := c.w
	ms := fakeModels[Anthropic]
	data := make([]any, 0, len(ms))
	for _, m := range ms {
		data = append(data, map[string]any{"type": "model", "id": m, "display_name": m, "created_at": "2025-05-22T00:00:00Z"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": false, "first_id": ms[0], "last_id": ms[len(ms)-1]})
}

// messageRequest is what the fake reads of an Anthropic Messages request.
type messageRequest struct {
	Model     string            `json:"model"`
	MaxTokens *int              `json:"max_tokens"`
	Messages  []json.RawMessage `json:"messages"`
	Stream    bool              `json:"stream"`
}

// check validates the request with Anthropic's messages (which name the field in the text).
func (r *messageRequest) check() error {
	switch {
	case r.Model == "":
		return &badRequest{msg: "model: Field required"}
	case r.MaxTokens == nil:
		return &badRequest{msg: "max_tokens: Field required"}
	case *r.MaxTokens < 1:
		return &badRequest{msg: "max_tokens: Input should be greater than or equal to 1"}
	case len(r.Messages) == 0:
		return &badRequest{msg: "messages: at least one message is required"}
	}
	return nil
}

// message answers POST /v1/messages (Anthropic).
func (p *Provider) message(c *call) {
	req, ok := accept(c, (*messageRequest).check)
	if !ok {
		return
	}
	in := tokens(bytes.Join(rawBytes(req.Messages), nil))
	c.generate(req.Model, req.Stream, func(text string) streamer {
		return &anthropicStreamer{id: p.id("msg"), model: req.Model, in: in, out: tokens([]byte(text))}
	}, func(text string) any {
		return map[string]any{
			"id":            p.id("msg"),
			"type":          "message",
			"role":          "assistant",
			"model":         req.Model,
			"content":       []any{map[string]any{"type": "text", "text": text}},
			"stop_reason":   "end_turn",
			"stop_sequence": nil,
			"usage":         map[string]any{"input_tokens": in, "output_tokens": tokens([]byte(text))},
		}
	})
}
