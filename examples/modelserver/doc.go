// Package modelserver is a fake model server: a small Go HTTP handler that
// speaks enough of vLLM's OpenAI-compatible API or of Triton's KServe v2
// HTTP API for Atelier's inference serving to deploy, probe, scrape,
// autoscale and roll out against it, without a GPU.
//
// # Why it exists
//
// Atelier's development machines and CI have no GPU, and vLLM's own
// simulator (llm-d-inference-sim) cannot be fetched from the Go module proxy
// here. This package is therefore built to be both the demo backend of
// `make dev` and the test fixture of the serving integration tests.
//
// # Starting it
//
// In process (a Server is an http.Handler):
//
//	fake := modelserver.New(modelserver.Config{Backend: modelserver.BackendVLLM,
//		Revision: "canary", StartupDelay: 2 * time.Second, ServiceTime: 50 * time.Millisecond})
//	defer fake.Close()
//	ts := httptest.NewServer(fake)
//	defer ts.Close()
//	fake.SetFaults(modelserver.Faults{ErrorRate: new(1.0)}) // a 5xx burst
//
// As a process (what a Deployment or a local-runtime step runs):
//
//	go build -o modelserver ./examples/modelserver/cmd/modelserver
//	./modelserver -addr 127.0.0.1:0 -backend triton -revision r2
//
// It also takes the real engines' command lines (`serve --model M --port P`
// as vLLM, `--model-repository=R --load-model=N --http-port P
// --metrics-port M` as Triton), so Atelier's local runtime can run it as
// either engine: `atelier worker --local-engine vllm=./modelserver`.
//
// It logs "listening addr=HOST:PORT" on stderr for each listener, exits 0
// on SIGTERM after draining, 3 on an injected crash, 1 on a bad setting.
// Change its behaviour from a test with PostFaults or a plain
// POST /admin/faults.
//
// # What it fakes
//
//   - vLLM (Backend "vllm"): GET /health (200 as soon as the process is up,
//     even while the model loads, like vLLM); GET /v1/models (the model, or
//     503 until it is loaded); POST /v1/completions and
//     POST /v1/chat/completions with OpenAI's non-streaming request and
//     response shapes, deterministic text derived from the model name and
//     the prompt, and usage counts (a token is a whitespace-separated word);
//     GET /metrics with vLLM's names: vllm:num_requests_running,
//     vllm:num_requests_waiting, vllm:kv_cache_usage_perc (running / slots),
//     vllm:request_success_total (by finished_reason),
//     vllm:prompt_tokens_total, vllm:generation_tokens_total and the
//     vllm:e2e_request_latency_seconds histogram, labelled engine="0" and
//     model_name.
//   - Triton (Backend "triton"): GET /v2/health/live, GET /v2/health/ready
//     and GET /v2/models/{name}[/versions/{v}]/ready (200 only once loaded),
//     GET /v2 and GET /v2/models/{name} metadata,
//     POST /v2/models/{name}[/versions/{v}]/infer with the KServe v2 JSON
//     tensors (datatype and element count are checked; each input comes
//     back as an output); GET /metrics with nv_inference_request_success,
//     nv_inference_request_failure, nv_inference_count,
//     nv_inference_request_duration_us, nv_inference_queue_duration_us and
//     nv_inference_pending_request_count, labelled model and version (the
//     failure counter counts injected 500s and 429s; the duration counters
//     successful requests only).
//     Triton serves metrics on port 8002: set Config.NoMetricsRoute and
//     serve MetricsHandler elsewhere (the command's -metrics-addr).
//   - Serving behaviour: a model that loads for Config.StartupDelay; a fixed
//     number of running slots (Config.Concurrency) each held for
//     Config.ServiceTime; a real FIFO behind them whose length is the
//     waiting / pending metric, bounded by Config.MaxQueue (429 past it);
//     injected 500s at an exact rate (a counter pattern, not chance, so a
//     test can assert the fraction); crashes after N answers or after a
//     delay (the command exits 3, so Kubernetes sees a crash loop); and
//     Config.Revision in an X-Model-Revision header on every response and
//     in inference bodies, so a canary's traffic split can be measured.
//     All of it changes at run time through POST /admin/faults (see Faults),
//     for instance a 5xx burst in the middle of a rollout.
//
// Time comes from an injectable Clock, so tests flip readiness and finish
// requests by advancing a fake clock instead of sleeping.
//
// # What it does not fake
//
// No model, no GPU and no batching maths: latency is the queue wait plus a
// fixed service time, whatever the prompt length. No streaming (stream=true
// is answered 400), no embeddings, tokenizer, logprobs, LoRA adapters or
// tool calls; no gRPC (Triton's port 8001) and no binary tensor extension;
// no Triton model repository API or multiple models. The queue limit
// answers 429 in both dialects (Triton answers 503 when its dynamic
// batcher's queue is full, vLLM has no limit). Injected crashes abort every
// connection; in process the Server cannot exit, so it aborts and closes
// Crashed. The admin endpoint has no authentication: never expose the fake
// outside a test or dev machine.
package modelserver
