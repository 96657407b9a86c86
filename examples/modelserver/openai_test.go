package modelserver

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestVLLMCompletionShapes(t *testing.T) {
	f := start(t, Config{Model: "org/llm-7b", Revision: "r2"})
	tests := []struct {
		name        string
		body        string
		wantChoices int
		wantPrompt  int    // usage.prompt_tokens
		wantReason  string // of every choice, "" to skip
		wantWords   int    // per choice, 0 to skip
	}{
		{"string prompt", `{"model":"org/llm-7b","prompt":"the quick brown fox","max_tokens":5,"temperature":0.7}`, 1, 4, "length", 5},
		{"no model field", `{"prompt":"hi","max_tokens":1000}`, 1, 1, "stop", 0},
		{"batch of prompts, n=2", `{"prompt":["one two","three"],"n":2,"max_tokens":3}`, 4, 3, "length", 3},
		{"token ids", `{"prompt":[1,2,3,4,5,6],"max_tokens":2}`, 1, 6, "length", 2},
		{"batch of token ids", `{"prompt":[[1,2],[3]],"max_tokens":2}`, 2, 3, "length", 2},
		{"default max_tokens is 16", `{"prompt":"x"}`, 1, 1, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.do(t, "POST", "/v1/completions", tt.body)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			checkKeys(t, r.body, "id", "object", "created", "model", "choices", "usage")
			resp := decode[CompletionResponse](t, r)
			if resp.Object != "text_completion" || resp.Model != "org/llm-7b" || !strings.HasPrefix(resp.ID, "cmpl-") ||
				resp.Created != f.clock.Now().Unix() || resp.Revision != "r2" {
				t.Errorf("envelope %+v", resp)
			}
			if len(resp.Choices) != tt.wantChoices {
				t.Fatalf("%d choices, want %d", len(resp.Choices), tt.wantChoices)
			}
			gen := 0
			for i, c := range resp.Choices {
				words := len(strings.Fields(c.Text))
				gen += words
				if c.Index != i || c.Text == "" || c.FinishReason != "stop" && c.FinishReason != "length" {
					t.Errorf("choice %d: %+v", i, c)
				}
				if tt.wantReason != "" && c.FinishReason != tt.wantReason {
					t.Errorf("choice %d finish reason %s, want %s", i, c.FinishReason, tt.wantReason)
				}
				if tt.wantWords != 0 && words != tt.wantWords {
					t.Errorf("choice %d has %d words, want %d", i, words, tt.wantWords)
				}
				if words > 16 && strings.Contains(tt.name, "default") {
					t.Errorf("choice %d has %d words past the default max_tokens", i, words)
				}
			}
			if u := resp.Usage; u.PromptTokens != tt.wantPrompt || u.CompletionTokens != gen || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("usage %+v, want prompt %d completion %d", u, tt.wantPrompt, gen)
			}
		})
	}
}

func TestVLLMChatShapes(t *testing.T) {
	f := start(t, Config{})
	tests := []struct {
		name       string
		body       string
		wantPrompt int
	}{
		{"string content", `{"model":"fake-model","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]}`, 6},
		{"content parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"describe"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, 2},
		{"max_completion_tokens wins", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":9,"max_completion_tokens":1}`, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.do(t, "POST", "/v1/chat/completions", tt.body)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			checkKeys(t, r.body, "id", "object", "created", "model", "choices", "usage")
			resp := decode[ChatCompletionResponse](t, r)
			if resp.Object != "chat.completion" || resp.Model != "fake-model" || !strings.HasPrefix(resp.ID, "chatcmpl-") {
				t.Errorf("envelope %+v", resp)
			}
			if len(resp.Choices) != 1 {
				t.Fatalf("%d choices", len(resp.Choices))
			}
			c := resp.Choices[0]
			if c.Message.Role != "assistant" || c.Message.Content == "" {
				t.Errorf("message %+v", c.Message)
			}
			words := len(strings.Fields(c.Message.Content))
			if u := resp.Usage; u.PromptTokens != tt.wantPrompt || u.CompletionTokens != words || u.TotalTokens != tt.wantPrompt+words {
				t.Errorf("usage %+v for %d words", u, words)
			}
			if strings.Contains(tt.name, "max_completion_tokens") && (words != 1 || c.FinishReason != "length") {
				t.Errorf("max_completion_tokens 1: %d words, %s", words, c.FinishReason)
			}
		})
	}
}

func TestVLLMTextIsDeterministic(t *testing.T) {
	a, b := start(t, Config{Revision: "old"}), start(t, Config{Revision: "new"})
	text := func(f *fixture, prompt string) string {
		r := f.do(t, "POST", "/v1/completions", `{"prompt":"`+prompt+`","max_tokens":50}`)
		return decode[CompletionResponse](t, r).Choices[0].Text
	}
	first := text(a, "tell me a story")
	if again := text(a, "tell me a story"); again != first {
		t.Errorf("same prompt, different text: %q then %q", first, again)
	}
	if other := text(b, "tell me a story"); other != first {
		t.Errorf("another server (revision) changed the text: %q vs %q", first, other)
	}
	if other := text(a, "tell me a poem"); other == first {
		t.Errorf("different prompts gave the same text %q", first)
	}
}

func TestVLLMRequestErrors(t *testing.T) {
	f := start(t, Config{})
	tests := []struct {
		name, path, body string
		want             int
	}{
		{"unknown model", "/v1/completions", `{"model":"gpt-4","prompt":"x"}`, 404},
		{"unknown chat model", "/v1/chat/completions", `{"model":"gpt-4","messages":[{"role":"user","content":"x"}]}`, 404},
		{"no prompt", "/v1/completions", `{"max_tokens":3}`, 400},
		{"prompt of objects", "/v1/completions", `{"prompt":[{"a":1}]}`, 400},
		{"empty prompt list", "/v1/completions", `{"prompt":[]}`, 400},
		{"max_tokens 0", "/v1/completions", `{"prompt":"x","max_tokens":0}`, 400},
		{"n too large", "/v1/completions", `{"prompt":"x","n":100}`, 400},
		{"streaming", "/v1/completions", `{"prompt":"x","stream":true}`, 400},
		{"chat streaming", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream":true}`, 400},
		{"no messages", "/v1/chat/completions", `{"messages":[]}`, 400},
		{"message without role", "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400},
		{"content number", "/v1/chat/completions", `{"messages":[{"role":"user","content":3}]}`, 400},
		{"not JSON", "/v1/completions", `{`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.do(t, "POST", tt.path, tt.body)
			if r.status != tt.want {
				t.Fatalf("status %d, want %d: %s", r.status, tt.want, r.body)
			}
			e := decode[OpenAIError](t, r)
			if e.Error.Code != tt.want || e.Error.Message == "" || e.Error.Type == "" {
				t.Errorf("error body %+v", e)
			}
		})
	}
	if st := f.Stats(); st.Succeeded+st.Failed != 0 {
		t.Errorf("rejected requests were counted: %+v", st)
	}
	if r := f.do(t, "GET", "/v1/completions", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/completions: %d", r.status)
	}
	if r := f.do(t, "GET", "/v2/health/live", ""); r.status != http.StatusNotFound {
		t.Errorf("a vLLM fake serves Triton routes: %d", r.status)
	}
}

func TestVLLMModelList(t *testing.T) {
	f := start(t, Config{Model: "m1"})
	r := f.do(t, "GET", "/v1/models", "")
	list := decode[ModelList](t, r)
	if list.Object != "list" || len(list.Data) != 1 {
		t.Fatalf("list %+v", list)
	}
	if c := list.Data[0]; c.ID != "m1" || c.Object != "model" || c.Root != "m1" || c.OwnedBy != "vllm" || c.MaxModelLen <= 0 {
		t.Errorf("card %+v", c)
	}
}

// checkKeys asserts the top-level JSON keys an OpenAI client reads.
func checkKeys(t *testing.T, body []byte, keys ...string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			got := make([]string, 0, len(m))
			for k := range m {
				got = append(got, k)
			}
			slices.Sort(got)
			t.Errorf("response lacks %q (has %v)", k, got)
		}
	}
}
