// Package proxy is the request path of inference endpoints: the gateway
// serves /v1/projects/{p}/endpoints/{e}/v1/… (OpenAI-style, vLLM) and
// /v2/… (KServe v2, Triton) by forwarding each request to a ready replica
// of the endpoint, with the caller's Atelier token removed (the engine is
// user code and never sees platform credentials).
//
// # Routing
//
// The route is the endpoint workflow's own status (Resolver), cached for
// a second: the traffic weights it last applied and, per revision, the
// URLs of its ready replicas. A request goes to a revision drawn by weight
// among the revisions that have ready replicas, then to its URLs in turn.
// A request with the header X-Atelier-Revision: N goes to revision N
// whatever its weight (a blue-green preview at 0%); responses carry the
// same header naming the revision that answered. Because the proxy itself
// does the split, the weights hold for requests through the gateway on
// every runtime; in-cluster clients that call the HTTPRoute directly get
// the Gateway API's split instead, and are not counted here.
//
// # Scale from zero
//
// While no replica is ready (an endpoint scaled to zero, or one whose
// replicas are all starting) a request is held, not failed: the endpoint's
// workflow is told at once how many requests are held (the 0→1 signal,
// which wakes it without waiting for its tick) and every second while the
// hold lasts; the request is forwarded as soon as a replica is ready. At
// most MaxHeld requests are held per endpoint: the next ones get 429 with
// Retry-After. A held request gives up after MaxHold (or its own
// deadline) with 503 and Retry-After.
//
// # Traffic figures
//
// Every forwarded request is counted per revision: requests, errors (a
// 5xx, or no answer: 502) and a latency histogram
// (inference.LatencyHistogram). The counts since the last report go to the
// endpoint's workflow every second while there is traffic (Reporter: a
// signal), where they feed the rollout's error-rate and latency gates. A
// report that cannot be delivered is dropped: that only shrinks a gate's
// sample, which the gates answer with "insufficient samples", never with
// a false verdict.
//
// The proxy's state is per gateway process and in memory; several
// gateways each hold and report their own requests.
package proxy
