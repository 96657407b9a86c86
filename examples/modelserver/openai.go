package modelserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
)

// The OpenAI-compatible shapes vLLM serves, reduced to what the fake reads
// and writes. Unknown request fields (temperature, top_p, ...) are accepted
// and ignored.

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model string `json:"model,omitempty"`
	// Prompt is a string, a list of strings (a batch), a list of token ids
	// or a list of such lists.
	Prompt    any  `json:"prompt"`
	MaxTokens *int `json:"max_tokens,omitempty"`
	N         int  `json:"n,omitempty"`
	Stream    bool `json:"stream,omitempty"`
}

// ChatCompletionRequest is the body of POST /v1/chat/completions.
type ChatCompletionRequest struct {
	Model               string        `json:"model,omitempty"`
	Messages            []ChatMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int          `json:"max_completion_tokens,omitempty"`
	N                   int           `json:"n,omitempty"`
	Stream              bool          `json:"stream,omitempty"`
}

// ChatMessage is one message of a chat request. Content is a string or a
// list of parts such as {"type":"text","text":"..."}.
type ChatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// Usage counts tokens. The fake's tokens are whitespace-separated words.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// CompletionResponse answers POST /v1/completions.
type CompletionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"` // text_completion
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   Usage              `json:"usage"`
	// Revision is Config.Revision (not an OpenAI field; clients ignore it).
	Revision string `json:"revision,omitempty"`
}

// CompletionChoice is one generated text.
type CompletionChoice struct {
	Index        int    `json:"index"`
	Text         string `json:"text"`
	Logprobs     any    `json:"logprobs"`
	FinishReason string `json:"finish_reason"` // stop or length
}

// ChatCompletionResponse answers POST /v1/chat/completions.
type ChatCompletionResponse struct {
	ID       string       `json:"id"`
	Object   string       `json:"object"` // chat.completion
	Created  int64        `json:"created"`
	Model    string       `json:"model"`
	Choices  []ChatChoice `json:"choices"`
	Usage    Usage        `json:"usage"`
	Revision string       `json:"revision,omitempty"`
}

// ChatChoice is one generated message.
type ChatChoice struct {
	Index        int              `json:"index"`
	Message      ChatReplyMessage `json:"message"`
	FinishReason string           `json:"finish_reason"`
}

// ChatReplyMessage is the assistant's message.
type ChatReplyMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ModelList answers GET /v1/models.
type ModelList struct {
	Object string      `json:"object"` // list
	Data   []ModelCard `json:"data"`
}

// ModelCard describes the served model.
type ModelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"` // model
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root"`
	MaxModelLen int    `json:"max_model_len"`
}

// OpenAIError is the error body: {"error": {...}}.
type OpenAIError struct {
	Error OpenAIErrorDetail `json:"error"`
}

// OpenAIErrorDetail says what went wrong.
type OpenAIErrorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

const maxModelLen = 4096

func (s *Server) vllmRoutes(mux *http.ServeMux) {
	// Real vLLM answers /health once the API server is up.
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
}

func openAIError(w http.ResponseWriter, status int, msg string) {
	typ := map[int]string{
		http.StatusBadRequest:          "BadRequestError",
		http.StatusNotFound:            "NotFoundError",
		http.StatusTooManyRequests:     "RateLimitError",
		http.StatusInternalServerError: "InternalServerError",
		http.StatusServiceUnavailable:  "ServiceUnavailableError",
	}[status]
	respond(w, status, OpenAIError{Error: OpenAIErrorDetail{Message: msg, Type: typ, Code: status}})
}

func (s *Server) listModels(w http.ResponseWriter, _ *http.Request) {
	if !s.Loaded() {
		openAIError(w, http.StatusServiceUnavailable, errNotLoaded.Error())
		return
	}
	respond(w, http.StatusOK, ModelList{Object: "list", Data: []ModelCard{{
		ID: s.cfg.Model, Object: "model", Created: s.cfg.Clock.Now().Unix(), OwnedBy: "vllm",
		Root: s.cfg.Model, MaxModelLen: maxModelLen,
	}}})
}

// checkModel, maxTokens and choices are the request checks vLLM makes before
// scheduling.
func (s *Server) checkModel(model string) error {
	if model != "" && model != s.cfg.Model {
		return fmt.Errorf("the model `%s` does not exist", model)
	}
	return nil
}

func maxTokens(dflt int, vals ...*int) (int, error) {
	for _, v := range vals {
		if v != nil {
			if *v < 1 {
				return 0, fmt.Errorf("max_tokens must be at least 1, got %d", *v)
			}
			return *v, nil
		}
	}
	return dflt, nil
}

func choices(n int) (int, error) {
	switch {
	case n == 0:
		return 1, nil
	case n < 0 || n > 16:
		return 0, fmt.Errorf("n must be between 1 and 16, got %d", n)
	}
	return n, nil
}

// admitOpenAI runs the shared part of an inference request and writes the
// error response when there is one; a nil ticket means the request is over.
func (s *Server) admitOpenAI(w http.ResponseWriter, r *http.Request) *ticket {
	t, err := s.acquire(r.Context())
	switch {
	case errors.Is(err, errNotLoaded):
		openAIError(w, http.StatusServiceUnavailable, err.Error())
		return nil
	case errors.Is(err, errQueueFull):
		openAIError(w, http.StatusTooManyRequests, err.Error())
		return nil
	case t == nil: // client gone
		return nil
	case t.fail:
		crash := s.finish(t, outcome{})
		s.answer(w, http.StatusInternalServerError,
			OpenAIError{Error: OpenAIErrorDetail{Message: "injected fault", Type: "InternalServerError", Code: 500}}, crash)
		return nil
	}
	return t
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if err := decodeJSON(r, &req); err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		openAIError(w, http.StatusNotFound, err.Error())
		return
	}
	prompts, err := promptTexts(req.Prompt)
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := maxTokens(16, req.MaxTokens)
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	n, err := choices(req.N)
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Stream {
		openAIError(w, http.StatusBadRequest, "the fake model server does not stream; send stream=false")
		return
	}
	t := s.admitOpenAI(w, r)
	if t == nil {
		return
	}
	resp := CompletionResponse{
		ID: "cmpl-" + strconv.FormatUint(t.id, 10), Object: "text_completion",
		Created: s.cfg.Clock.Now().Unix(), Model: s.cfg.Model, Revision: s.cfg.Revision,
	}
	reason := "stop"
	for p, prompt := range prompts {
		resp.Usage.PromptTokens += prompt.tokens
		for i := range n {
			words, why := generate(s.cfg.Model, prompt.text, i, limit)
			resp.Choices = append(resp.Choices, CompletionChoice{
				Index: p*n + i, Text: " " + strings.Join(words, " "), FinishReason: why})
			resp.Usage.CompletionTokens += len(words)
			if why == "length" {
				reason = why
			}
		}
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	crash := s.finish(t, outcome{ok: true, finishReason: reason,
		promptTokens: resp.Usage.PromptTokens, genTokens: resp.Usage.CompletionTokens})
	s.answer(w, http.StatusOK, resp, crash)
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req ChatCompletionRequest
	if err := decodeJSON(r, &req); err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		openAIError(w, http.StatusNotFound, err.Error())
		return
	}
	prompt, err := chatText(req.Messages)
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := maxTokens(256, req.MaxCompletionTokens, req.MaxTokens)
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	n, err := choices(req.N)
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Stream {
		openAIError(w, http.StatusBadRequest, "the fake model server does not stream; send stream=false")
		return
	}
	t := s.admitOpenAI(w, r)
	if t == nil {
		return
	}
	resp := ChatCompletionResponse{
		ID: "chatcmpl-" + strconv.FormatUint(t.id, 10), Object: "chat.completion",
		Created: s.cfg.Clock.Now().Unix(), Model: s.cfg.Model, Revision: s.cfg.Revision,
		Usage: Usage{PromptTokens: prompt.tokens},
	}
	reason := "stop"
	for i := range n {
		words, why := generate(s.cfg.Model, prompt.text, i, limit)
		resp.Choices = append(resp.Choices, ChatChoice{Index: i, FinishReason: why,
			Message: ChatReplyMessage{Role: "assistant", Content: strings.Join(words, " ")}})
		resp.Usage.CompletionTokens += len(words)
		if why == "length" {
			reason = why
		}
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	crash := s.finish(t, outcome{ok: true, finishReason: reason,
		promptTokens: resp.Usage.PromptTokens, genTokens: resp.Usage.CompletionTokens})
	s.answer(w, http.StatusOK, resp, crash)
}

// prompt is one prompt as the generator sees it.
type prompt struct {
	text   string
	tokens int
}

// promptTexts accepts the four shapes of the OpenAI prompt field.
func promptTexts(p any) ([]prompt, error) {
	errShape := errors.New("prompt must be a string, a list of strings, a list of token ids or a list of such lists")
	tokenIDs := func(list []any) (prompt, bool) {
		ids := make([]string, len(list))
		for i, v := range list {
			n, ok := v.(json.Number)
			if !ok {
				return prompt{}, false
			}
			ids[i] = n.String()
		}
		return prompt{text: strings.Join(ids, " "), tokens: len(list)}, true
	}
	switch v := p.(type) {
	case string:
		return []prompt{{text: v, tokens: len(strings.Fields(v))}}, nil
	case []any:
		if len(v) == 0 {
			return nil, errShape
		}
		if one, ok := tokenIDs(v); ok {
			return []prompt{one}, nil
		}
		out := make([]prompt, 0, len(v))
		for _, e := range v {
			switch e := e.(type) {
			case string:
				out = append(out, prompt{text: e, tokens: len(strings.Fields(e))})
			case []any:
				one, ok := tokenIDs(e)
				if !ok {
					return nil, errShape
				}
				out = append(out, one)
			default:
				return nil, errShape
			}
		}
		return out, nil
	}
	return nil, errShape
}

// chatText flattens the messages into one prompt: "role: content" lines.
func chatText(msgs []ChatMessage) (prompt, error) {
	if len(msgs) == 0 {
		return prompt{}, errors.New("messages must not be empty")
	}
	var sb strings.Builder
	for i, m := range msgs {
		if m.Role == "" {
			return prompt{}, fmt.Errorf("messages[%d].role is missing", i)
		}
		sb.WriteString(m.Role + ":")
		switch c := m.Content.(type) {
		case nil:
		case string:
			sb.WriteString(" " + c)
		case []any:
			for _, part := range c {
				obj, _ := part.(map[string]any)
				if text, ok := obj["text"].(string); ok {
					sb.WriteString(" " + text)
				}
			}
		default:
			return prompt{}, fmt.Errorf("messages[%d].content must be a string or a list of parts", i)
		}
		sb.WriteString("\n")
	}
	text := sb.String()
	return prompt{text: text, tokens: len(strings.Fields(text))}, nil
}

var vocabulary = strings.Fields(`the a model serves tokens quickly slowly under load gpu queue batch
	request answer prompt cache kernel tensor latency throughput canary revision stable rollout traffic
	replica scale warm cold engine shard layer attention head weight gradient sample echo fake atelier
	temporal workflow signal timer retry health ready live metric gauge counter histogram bucket
	vector matrix cluster node pod`)

// generate returns the fake completion of text for choice i: a word
// sequence fixed by the model, the text and i. Its natural length is 8 to 40
// words; when limit cuts it short the finish reason is "length".
func generate(model, text string, i, limit int) ([]string, string) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(model + "\x00" + text + "\x00" + strconv.Itoa(i)))
	x := h.Sum64() | 1
	next := func() uint64 { // xorshift64
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	n, reason := 8+int(next()%33), "stop"
	if limit < n {
		n, reason = limit, "length"
	}
	words := make([]string, n)
	for j := range words {
		words[j] = vocabulary[next()%uint64(len(vocabulary))]
	}
	return words, reason
}
