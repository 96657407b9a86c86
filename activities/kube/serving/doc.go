// Package serving is the Kubernetes backend of inference serving: thin,
// idempotent activities that make an endpoint's objects match what the
// endpoint's entity workflow decided (with package inference) and report
// what the cluster shows. It decides nothing: replica counts, traffic
// weights, deadlines and gates are the workflow's.
//
// Every cluster worker constructs one beside kube.Backend (wire's
// provideServing) and registers both the per-object activities (Register)
// and the endpoint workflow's contract over them (RegisterEndpoint,
// endpoint.go: observe every revision and scrape their queues in one
// activity, apply a whole layout, delete revisions, delete the endpoint),
// so an endpoint's history grows by a few events a tick. The worker's
// --gateway names the Gateway (WithGateway); without it endpoints report
// "replica-ratio" traffic.
//
// # Activities
//
// Registered under the names in package activities:
//
//	atelier.serving.revision.apply    ApplyRevision    Deployment of a revision, with replicas
//	atelier.serving.revision.scale    ScaleRevision    its replica count only
//	atelier.serving.revision.observe  ObserveRevision  replicas, startup phases, why not scheduled
//	atelier.serving.revision.delete   DeleteRevision   its Deployment and Service
//	atelier.serving.traffic.apply     ApplyTraffic     Services, and the HTTPRoute's weights
//	atelier.serving.endpoint.delete   DeleteEndpoint   everything of the endpoint, by label
//	atelier.serving.metrics.scrape    ScrapeMetrics    one scrape of a revision's replicas
//
// Every one is safe to retry: writes go through framework.Apply (create,
// or merge and update on conflict, writing nothing when nothing changed),
// deletes treat NotFound as done, reads have no effect. Errors follow
// activities/kube: a request that cannot succeed (invalid spec or weights,
// a rejection by the API server, an object of that name that Atelier does
// not manage or that belongs to another endpoint or revision) is a
// non-retryable application error of type InvalidStep whose message says
// what to change; everything else (network, 5xx, 429, conflicts past the
// retries) is a plain error, for Temporal to retry.
//
// # Objects
//
// In the project's namespace (template "atelier-{project}", as for
// steps; created if missing):
//
//   - Deployment "<endpoint>-r<N>-<10 hex>" per revision N, the hash of
//     (project, endpoint, N) keeping names distinct after truncation to 63
//     characters. Revisions are immutable, so a revision's Deployment never
//     needs a rolling update of its own: rollouts happen between
//     Deployments, under the workflow's control. One container, "server":
//     the revision's image, inference.ContainerArgs, env in order, whole
//     GPUs as nvidia.com/gpu limits with node selector
//     nvidia.com/gpu.product=<gpuType> (a MIG profile is its own resource,
//     without selector), CPU and memory with requests equal to limits;
//     ports from inference.Info (http, and grpc and metrics where the
//     backend has them). Service links are off: Kubernetes would inject
//     VLLM_PORT for a Service named vllm, which vLLM reads and dies on.
//   - Service "<revision name>" per revision that ApplyTraffic is given:
//     the backends of the HTTPRoute, and a stable address per revision.
//   - Service "<endpoint>" (the endpoint's name when it is a DNS-1035
//     label, else a derived name with a hash): the endpoint's in-cluster
//     address.
//   - HTTPRoute "<endpoint>", in gateway-api mode.
//
// Every object and pod carries atelier.dev/managed-by=atelier,
// atelier.dev/project, atelier.dev/endpoint and (revision objects and
// pods) atelier.dev/revision. These are identity labels: framework.Apply
// only modifies an existing object whose identity labels are the same as
// the desired object's, so a name that happens to be another endpoint's is
// never taken over.
//
// # What Apply owns
//
// The workflow is the only writer of replicas (there is no
// HorizontalPodAutoscaler: the autoscaler is inference.Autoscaler), so the
// Deployment merge overwrites replicas, the pod template, the strategy
// and the history limit, and adds Atelier's labels and annotations; it
// keeps everything else (status, others' labels and annotations, fields
// the API server defaulted). The template is replaced when Atelier's own
// template changed (a hash annotation, which also catches removed fields)
// or when a field Atelier sets drifted on the live object; fields Atelier
// leaves to the API server's defaults are not compared, so re-applying an
// unchanged revision writes nothing (the control-plane test checks this
// against a real API server). Services: type, selector and ports;
// HTTPRoutes: the whole spec (CRD defaults are spelled out for the same
// reason).
//
// The strategy is a rolling update with maxSurge 0 and maxUnavailable 1:
// a revision's template changes only when Atelier builds it differently
// (an upgrade), and such a change must never need GPUs beyond the
// revision's own.
//
// # Probes
//
// Readiness probes the backend's readiness path every 5s (failing after
// 3): Triton's /v2/health/ready is 200 only once its model is loaded
// (strict readiness). vLLM's /v1/models is the best a kubelet probe can
// do: the engine is ready only when that list holds the served model,
// which only reading the body proves (inference.ModelListed); a 200 there
// normally means it, but the workflow may verify it. The startup probe
// allows twice the revision's EngineReady budget (at least 30 minutes)
// before restarting a container that never becomes ready: the workflow's
// per-phase deadlines are the real bound and must always fire first; the
// probe is the backstop that frees the GPUs of a wedged engine when no
// workflow is watching. There is no liveness probe: a crashed engine
// exits and is restarted, and a hung one fails readiness and leaves the
// traffic, which the workflow sees.
//
// # Traffic
//
// ApplyTraffic takes weights per revision (summing to 100, or none: then
// nothing serves). The mode:
//
//   - "gateway-api" when the worker has a Gateway API client and a
//     Gateway to attach routes to (WithGateway), and the cluster serves
//     gateway.networking.k8s.io/v1 HTTPRoutes. Discovery is asked once a
//     minute at most (installing Gateway API takes effect without
//     restarting workers). The HTTPRoute has one rule for every path, one
//     backendRef per revision Service with its weight.
//   - "replica-ratio" otherwise: clients reach the stable Service, which
//     balances over the ready pods it selects, so each revision's share
//     is its share of ready replicas; the workflow sizes replicas to the
//     weights. A route left from an earlier gateway-api mode is deleted.
//
// In both modes the stable Service selects the only revision with weight
// when there is one (a blue-green preview at 0% gets no traffic through
// it), and every revision of the endpoint when several have weight: a
// Service selector cannot name a set of revisions, so a 0% revision that
// still has replicas then shares the in-cluster address. The result says
// which revisions are selected, the mode, and why that mode.
//
// # Observing
//
// ObserveRevision reads the Deployment and the revision's pods (from the
// API server's watch cache, cheap enough to poll every few seconds) and
// reports, per replica, the times of inference's startup phases:
// Scheduled (condition PodScheduled), ImagePulled (the container started,
// now or before its last restart, since it starts only once its image is
// there), EngineReady (condition Ready: the readiness probe passed; a
// replica that was ready and is not is not counted). Also: ready and
// crash-looping counts (CrashLoopBackOff, or restarts at the caller's
// threshold), pods terminating (their GPUs are not free yet), the
// scheduler's reason when it cannot place a pod ("0/8 nodes are
// available: 8 Insufficient nvidia.com/gpu."), and the first pod stuck on
// its image or configuration. Status() and Startup() on the result give
// inference.RevisionStatus and []inference.ReplicaStartup.
//
// # Metrics
//
// ScrapeMetrics GETs each ready pod's metrics endpoint once
// (http://<pod IP>:<metrics port><metrics path>), or the URLs given as
// Targets, and returns samples of the families asked for (default: the
// backend's queue and KV-cache gauges, what inference.Signal reads),
// parsed from the Prometheus text format by package enginemetrics
// (shared with the local runtime).
// A target that fails has its error in its own entry: its signal is
// unknown, never zero. Scraping pod IPs needs a worker on the pod
// network; on kwok's fake nodes pods have IPs but no containers, so tests
// give Targets pointing at an in-process examples/modelserver.
//
// # RBAC
//
// namespaces get, create; deployments.apps and services create, get,
// update, list, delete; httproutes.gateway.networking.k8s.io the same
// (when used); pods list; discovery of gateway.networking.k8s.io/v1.
package serving
