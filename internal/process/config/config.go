package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// Config is everything the atelier binary needs. Each field can be set by a
// flag or by the ATELIER_* environment variable named in its flag help; flags
// win. Zero values are filled with the defaults below.
type Config struct {
	DatabaseURL      string
	TemporalHostPort string
	Namespace        string
	TemporalUIURL    string
	ListenAddr       string
	DataDir          string
	LogLevel         string
	// LogFormat is "console" (human) or "json".
	LogFormat string
	// ShutdownTimeout bounds graceful stops of the gateway and worker.
	ShutdownTimeout time.Duration
	// DrainDelay is how long a stopping gateway keeps serving while
	// answering /readyz 503, so that load balancers and kube-proxy stop
	// sending it new connections before it closes its listener.
	DrainDelay time.Duration
	// WorkerConcurrency caps concurrently running activities per worker.
	WorkerConcurrency int
	// Examples registers the example Go pipelines on the worker (on in
	// `atelier dev`, off by default).
	Examples bool
	// StreamLimit caps the event and log-follow streams one token may hold
	// open on a gateway.
	StreamLimit int
	// TaskQueue is the local runtime's task queue: workers poll it, the
	// gateway starts declarative runs on it.
	TaskQueue string
	// TokenCacheTTL is how long the gateway keeps a resolved API token
	// before looking it up again: the bound on how long a token revoked
	// elsewhere keeps working on this gateway. 0 looks tokens up on every
	// request.
	TokenCacheTTL time.Duration
	// Retention is how long the gateway keeps finished runs (rows and step
	// logs) after their last write; 0 keeps them forever (internal/services/retention).
	Retention time.Duration
	// GPUMinRuntime is how long an admitted GPU workload runs before it
	// may be preempted (gpu.Policy.MinRuntime).
	GPUMinRuntime time.Duration
	// WebhookAllowPrivate lets webhooks reach loopback, private and
	// link-local addresses (internal/services/webhooks); off by default, on in
	// `atelier dev`.
	WebhookAllowPrivate bool
	// SecretsKeyURL names the key that seals project secrets
	// (internal/platform/secretbox: base64key://<key> for a local key);
	// empty: no secrets (their routes are 503, steps that reference one
	// fail). SecretsOldKeyURLs are keys being rotated out: still opened,
	// and the values they sealed are rewrapped with the current key at
	// start.
	SecretsKeyURL     string
	SecretsOldKeyURLs []string
	// ArtifactsURL is the object store of step artifacts, a
	// gocloud.dev/blob URL of a driver linked in (s3://bucket?region=...,
	// file:///dir), shared by the workers (which move the bytes) and the
	// gateway (which serves them); empty: steps cannot declare artifacts
	// and downloads are 503. `atelier dev` uses a directory under .atelier.
	// Credentials come from the environment (AWS_* for S3).
	ArtifactsURL string
	// ArtifactsProjectLimit caps the bytes of each project's artifacts
	// (workers refuse outputs past it, and the gateway launchers' uploads);
	// 0: no cap.
	ArtifactsProjectLimit int64
	// ArtifactsImport is what steps may import as input artifacts from
	// outside the store (an input's uri): comma-separated
	// "[<project>=]<URI prefix>[?<bucket options>]" (activities/imports
	// ParseAllow); empty: nothing. Workers read the sources with their own
	// credentials, so only prefixes the projects named may read belong
	// here.
	ArtifactsImport string
	// WebhookBackoff is the wait before a failed delivery's second
	// attempt (it doubles up to an hour); WebhookMaxAttempts is when a
	// delivery gives up.
	WebhookBackoff     time.Duration
	WebhookMaxAttempts int
	// LocalGPUs is which of the machine's GPUs local steps may use:
	// "auto" (every device nvidia-smi lists), "none", or indices "0,2".
	LocalGPUs string
	// StepUser is who local steps run as (see local.ParseStepUser): empty
	// means an unprivileged uid when the worker is root.
	StepUser string
	// LocalOrphanTimeout is how long a local step keeps running after its
	// worker was lost, for the next worker on the machine to adopt it
	// (local.WithOrphanTimeout); 0 ties steps to their worker.
	LocalOrphanTimeout time.Duration
	// LocalEngines overrides the executables of serving engines for
	// inference endpoints on the local runtime: backend (vllm, triton) →
	// path (see local.ParseEngines). Unset: vllm and tritonserver on PATH.
	LocalEngines map[string]string

	// MetricsAddr, when set, serves /metrics on this address besides the
	// process's work (workers have no REST API to serve it on).
	MetricsAddr string
	// MetricsTenantLabels adds project labels to run and step metrics and
	// endpoint and revision labels to the gateway proxy's (see package
	// telemetry for why they are off by default).
	MetricsTenantLabels bool

	// Cluster, when set, makes `atelier worker` the worker of that
	// Kubernetes cluster (see BindWorker) instead of a local-runtime worker.
	Cluster string
	// ClusterLabels replace the cluster's registered labels at start; nil
	// (no flag, no environment variable) keeps the registered ones, so
	// labels set by an admin through the API survive restarts.
	ClusterLabels map[string]string
	// Kubeconfig is a kubeconfig path (or a list, like KUBECONFIG). Empty
	// means in-cluster credentials inside a pod, else ~/.kube/config.
	Kubeconfig  string
	KubeContext string
	// KubeNamespaceTemplate names the namespace of a project's objects;
	// "{project}" is replaced by the project name. Without "{project}" all
	// projects share that one namespace (and namespaced RBAC suffices).
	KubeNamespaceTemplate string
	// KubeQPS and KubeBurst bound the worker's request rate to the API
	// server (client-go's defaults, 5 and 10, are far too low for a worker
	// watching many steps).
	KubeQPS   float32
	KubeBurst int
	// KubeGateway names the Gateway API Gateway ("namespace/name", or
	// "name" in the endpoint's own namespace) that inference endpoints'
	// HTTPRoutes attach to; empty: traffic split by replica ratio.
	KubeGateway string
	// KueueQueue, when set, makes the cluster worker submit Jobs and
	// RayJobs to Kueue's LocalQueue of that name (created suspended)
	// instead of using Atelier's own GPU admission.
	KueueQueue string
	// PodServiceAccounts are the service accounts projects' steps may run
	// as on this cluster (pod.serviceAccountName), besides the namespace's
	// default; the cluster's pod policy (framework.PodPolicy) refuses the
	// rest, and host paths, host namespaces and privileged containers.
	PodServiceAccounts []string
	// PodDefaults is a YAML or JSON file of pod settings (a step's `pod`)
	// every step pod on this cluster gets where its own leave them unset
	// (framework.PodPolicy.Defaults): e.g. the toleration of GPU nodes.
	PodDefaults string
	// LauncherImage and LauncherGatewayURL let container steps with
	// artifacts run on this cluster (activities/kube Launcher): the image
	// holding /atelier-launcher, and the gateway's URL as the cluster's
	// pods reach it.
	LauncherImage      string
	LauncherGatewayURL string
	// ArtifactsStagingURL and ArtifactsStagingURI let ray steps with
	// artifacts run on this cluster (internal/platform/artifactstore/
	// staging): the staging store as the worker opens it (a
	// gocloud.dev/blob URL, its credentials the worker's) and the same
	// place as the cluster's pods name it (s3://bucket/prefix), which
	// they reach with their own identity. Both or neither.
	ArtifactsStagingURL string
	ArtifactsStagingURI string

	// envErrs are ATELIER_* variables that are set but malformed. A bad
	// value must stop the process with its name, never fall back to the
	// default silently (a worker meant to run 2 steps must not run 200).
	envErrs []error
}

// Default returns the built-in defaults, which match `atelier dev`.
func Default() Config {
	return Config{
		TemporalHostPort:   "127.0.0.1:7233",
		Namespace:          "atelier",
		TemporalUIURL:      "http://127.0.0.1:8233",
		ListenAddr:         "127.0.0.1:8080",
		DataDir:            ".atelier/data",
		LogLevel:           "info",
		LogFormat:          "console",
		ShutdownTimeout:    20 * time.Second,
		WorkerConcurrency:  200,
		StreamLimit:        32,
		GPUMinRuntime:      5 * time.Minute,
		WebhookBackoff:     10 * time.Second,
		WebhookMaxAttempts: 10,
		TokenCacheTTL:      5 * time.Second,
		TaskQueue:          runstate.TaskQueueLocal,
		LocalGPUs:          "auto",
		LocalOrphanTimeout: time.Minute, // local.DefaultOrphanTimeout

		KubeNamespaceTemplate: "atelier-{project}",
		KubeQPS:               100,
		KubeBurst:             200,
	}
}

// Bind registers flags on fs whose defaults come from the environment, then
// the built-in defaults.
func (c *Config) Bind(fs *pflag.FlagSet) {
	d := Default()
	fs.StringVar(&c.DatabaseURL, "database-url", env("ATELIER_DATABASE_URL", d.DatabaseURL), "Postgres URL (ATELIER_DATABASE_URL)")
	fs.StringVar(&c.TemporalHostPort, "temporal", env("ATELIER_TEMPORAL", d.TemporalHostPort), "Temporal frontend host:port (ATELIER_TEMPORAL)")
	fs.StringVar(&c.Namespace, "namespace", env("ATELIER_NAMESPACE", d.Namespace), "Temporal namespace (ATELIER_NAMESPACE)")
	fs.StringVar(&c.TemporalUIURL, "temporal-ui", env("ATELIER_TEMPORAL_UI", d.TemporalUIURL), "Temporal Web UI base URL for deep links (ATELIER_TEMPORAL_UI)")
	fs.StringVar(&c.ListenAddr, "listen", env("ATELIER_LISTEN", d.ListenAddr), "gateway listen address (ATELIER_LISTEN)")
	fs.StringVar(&c.DataDir, "data-dir", env("ATELIER_DATA_DIR", d.DataDir), "local runtime working directory and log files (ATELIER_DATA_DIR)")
	fs.StringVar(&c.LogLevel, "log-level", env("ATELIER_LOG_LEVEL", d.LogLevel), "debug|info|warn|error (ATELIER_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", env("ATELIER_LOG_FORMAT", d.LogFormat), "console|json (ATELIER_LOG_FORMAT)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.envDuration("ATELIER_SHUTDOWN_TIMEOUT", d.ShutdownTimeout), "graceful stop bound (ATELIER_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&c.DrainDelay, "drain-delay", c.envDuration("ATELIER_DRAIN_DELAY", d.DrainDelay), "gateway: on SIGTERM, keep serving this long with /readyz answering 503 before closing the listener, so a Service's endpoints drop the pod first; the chart sets 5s (ATELIER_DRAIN_DELAY)")
	fs.StringVar(&c.TaskQueue, "task-queue", env("ATELIER_TASK_QUEUE", d.TaskQueue), "local runtime task queue (ATELIER_TASK_QUEUE)")
	fs.StringVar(&c.StepUser, "step-user", env("ATELIER_STEP_USER", d.StepUser), "user local steps run as: a name, uid or uid:gid; default: uid 65532 when the worker is root, else the worker's user; \"worker\" = the worker's user (ATELIER_STEP_USER)")
	fs.DurationVar(&c.LocalOrphanTimeout, "local-orphan-timeout", c.envDuration("ATELIER_LOCAL_ORPHAN_TIMEOUT", d.LocalOrphanTimeout), "worker: how long a local step keeps running after its worker was lost, for the next worker on this machine to adopt it; then it is stopped and run again; 0 = steps die with their worker (ATELIER_LOCAL_ORPHAN_TIMEOUT)")
	fs.StringVar(&c.LocalGPUs, "local-gpus", env("ATELIER_LOCAL_GPUS", d.LocalGPUs), "worker: GPUs local steps may use: auto (all that nvidia-smi lists), none, or device indices like 0,2 (ATELIER_LOCAL_GPUS)")
	c.LocalEngines = c.envMap("ATELIER_LOCAL_ENGINES")
	fs.StringToStringVar(&c.LocalEngines, "local-engine", c.LocalEngines, "worker: run local inference endpoints' engine from this executable instead of vllm / tritonserver on PATH: backend=path, repeatable, e.g. vllm=.atelier/bin/modelserver (ATELIER_LOCAL_ENGINES=vllm=/a,triton=/b)")
	fs.BoolVar(&c.Examples, "examples", c.envBool("ATELIER_EXAMPLES", d.Examples), "worker: also serve the example Go pipelines (examples/gopipeline); on in `atelier dev` (ATELIER_EXAMPLES)")
	fs.IntVar(&c.StreamLimit, "stream-limit", c.envInt("ATELIER_STREAM_LIMIT", d.StreamLimit), "event and log-follow streams one token may hold open per gateway; more get 429 (ATELIER_STREAM_LIMIT)")
	fs.DurationVar(&c.TokenCacheTTL, "token-cache-ttl", c.envDuration("ATELIER_TOKEN_CACHE_TTL", d.TokenCacheTTL), "gateway: keep resolved API tokens this long; a token revoked through another gateway or in the database keeps working here up to this long; 0 looks them up on every request (ATELIER_TOKEN_CACHE_TTL)")
	fs.DurationVar(&c.Retention, "retention", c.envDuration("ATELIER_RETENTION", d.Retention), "gateway: delete finished runs and their step logs this long after their last write, e.g. 720h; 0 keeps them forever (ATELIER_RETENTION)")
	fs.StringVar(&c.ArtifactsURL, "artifacts-url", env("ATELIER_ARTIFACTS_URL", d.ArtifactsURL), "object store of step artifacts for gateway and workers: s3://bucket?region=…, file:///dir; empty: no artifacts; `atelier dev`: .atelier/artifacts (ATELIER_ARTIFACTS_URL)")
	c.ArtifactsProjectLimit = c.envBytes("ATELIER_ARTIFACTS_PROJECT_LIMIT", d.ArtifactsProjectLimit)
	fs.Var((*byteSize)(&c.ArtifactsProjectLimit), "artifacts-project-limit", "worker and gateway: cap on each project's artifact bytes, e.g. 500Gi; a step whose outputs would pass it fails naming it (the gateway checks it for Kubernetes steps' launchers); 0: no cap (ATELIER_ARTIFACTS_PROJECT_LIMIT)")
	fs.StringVar(&c.ArtifactsImport, "artifacts-import", env("ATELIER_ARTIFACTS_IMPORT", d.ArtifactsImport), "worker: URI prefixes steps may import input artifacts from (an input's uri), comma-separated [<project>=]<prefix>[?<bucket options>], e.g. https://huggingface.co/,team-a=s3://team-a-data/?region=eu-west-1; the worker reads them with its own credentials; empty: none (ATELIER_ARTIFACTS_IMPORT)")
	// Keys are read from the environment only: a flag would show them in ps.
	c.SecretsKeyURL = env("ATELIER_SECRETS_KEY_URL", d.SecretsKeyURL)
	if old := env("ATELIER_SECRETS_OLD_KEY_URLS", ""); old != "" {
		c.SecretsOldKeyURLs = strings.Split(old, ",")
	}
	fs.BoolVar(&c.WebhookAllowPrivate, "webhook-allow-private", c.envBool("ATELIER_WEBHOOK_ALLOW_PRIVATE", d.WebhookAllowPrivate), "gateway: let webhooks reach loopback, private and link-local addresses (refused by default: a tenant could otherwise make the gateway call internal services); on in `atelier dev` (ATELIER_WEBHOOK_ALLOW_PRIVATE)")
	fs.DurationVar(&c.WebhookBackoff, "webhook-backoff", c.envDuration("ATELIER_WEBHOOK_BACKOFF", d.WebhookBackoff), "gateway: wait before retrying a failed webhook delivery; doubles with each attempt up to 1h (ATELIER_WEBHOOK_BACKOFF)")
	fs.IntVar(&c.WebhookMaxAttempts, "webhook-max-attempts", c.envInt("ATELIER_WEBHOOK_MAX_ATTEMPTS", d.WebhookMaxAttempts), "gateway: attempts of a webhook delivery before it is marked failed (ATELIER_WEBHOOK_MAX_ATTEMPTS)")
	fs.DurationVar(&c.GPUMinRuntime, "gpu-min-runtime", c.envDuration("ATELIER_GPU_MIN_RUNTIME", d.GPUMinRuntime), "worker: how long an admitted GPU step runs before GPU admission may preempt it (ATELIER_GPU_MIN_RUNTIME)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", env("ATELIER_METRICS_ADDR", d.MetricsAddr), "serve Prometheus /metrics on this address too, e.g. :9090 (workers have no other HTTP server; the gateway also serves /metrics on --listen); empty: off (ATELIER_METRICS_ADDR)")
	fs.BoolVar(&c.MetricsTenantLabels, "metrics-tenant-labels", c.envBool("ATELIER_METRICS_TENANT_LABELS", d.MetricsTenantLabels), "label run and step metrics by project, and endpoint traffic by endpoint and revision; off by default because series multiply with every project (ATELIER_METRICS_TENANT_LABELS)")
	fs.IntVar(&c.WorkerConcurrency, "worker-concurrency", c.envInt("ATELIER_WORKER_CONCURRENCY", d.WorkerConcurrency), "max concurrent activities per worker (ATELIER_WORKER_CONCURRENCY)")
}

// BindWorker registers the flags of `atelier worker` that only matter with
// --cluster, so other commands do not show them.
func (c *Config) BindWorker(fs *pflag.FlagSet) {
	d := Default()
	fs.StringVar(&c.Cluster, "cluster", env("ATELIER_CLUSTER", d.Cluster), "serve this Kubernetes cluster: register it and poll its task queue atelier-k8s-<cluster> (ATELIER_CLUSTER)")
	c.ClusterLabels = c.envMap("ATELIER_CLUSTER_LABELS")
	fs.StringToStringVar(&c.ClusterLabels, "cluster-label", c.ClusterLabels, "with --cluster: set the cluster's labels, k=v, repeatable; without it the registered labels are kept (ATELIER_CLUSTER_LABELS=k=v,k2=v2)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", env("ATELIER_KUBECONFIG", env("KUBECONFIG", d.Kubeconfig)), "kubeconfig of the cluster; default: in-cluster credentials in a pod, else ~/.kube/config (ATELIER_KUBECONFIG, KUBECONFIG)")
	fs.StringVar(&c.KubeContext, "kube-context", env("ATELIER_KUBE_CONTEXT", d.KubeContext), "kubeconfig context; default: the current context (ATELIER_KUBE_CONTEXT)")
	fs.StringVar(&c.KubeNamespaceTemplate, "kube-namespace-template", env("ATELIER_KUBE_NAMESPACE_TEMPLATE", d.KubeNamespaceTemplate), "namespace of a project's objects; {project} is replaced (ATELIER_KUBE_NAMESPACE_TEMPLATE)")
	fs.Float32Var(&c.KubeQPS, "kube-qps", c.envFloat32("ATELIER_KUBE_QPS", d.KubeQPS), "API server requests per second (ATELIER_KUBE_QPS)")
	fs.StringVar(&c.KubeGateway, "gateway", env("ATELIER_GATEWAY", d.KubeGateway), "with --cluster: the Gateway API Gateway (namespace/name) inference endpoints' HTTPRoutes attach to, for weighted traffic; without it traffic follows the replica ratio (ATELIER_GATEWAY)")
	fs.StringSliceVar(&c.PodServiceAccounts, "pod-service-accounts", envList("ATELIER_POD_SERVICE_ACCOUNTS"), "with --cluster: service accounts projects' steps may run as (pod.serviceAccountName), besides default (ATELIER_POD_SERVICE_ACCOUNTS, comma-separated)")
	fs.StringVar(&c.PodDefaults, "pod-defaults", env("ATELIER_POD_DEFAULTS", ""), "with --cluster: a YAML or JSON file of pod settings (the shape of a step's pod: tolerations, nodeSelector, priorityClassName, labels, ...) every step pod on this cluster gets where its own leave them unset (ATELIER_POD_DEFAULTS)")
	fs.StringVar(&c.LauncherImage, "launcher-image", env("ATELIER_LAUNCHER_IMAGE", ""), "with --cluster: the image holding /atelier-launcher (the Atelier image), which moves the artifacts of container steps in their pods (ATELIER_LAUNCHER_IMAGE)")
	fs.StringVar(&c.LauncherGatewayURL, "launcher-gateway-url", env("ATELIER_LAUNCHER_GATEWAY_URL", ""), "with --cluster: the gateway's URL as the cluster's pods reach it, e.g. http://atelier-gateway.atelier:8080; step launchers get signed URLs for their artifacts there (ATELIER_LAUNCHER_GATEWAY_URL)")
	fs.StringVar(&c.ArtifactsStagingURL, "artifacts-staging-url", env("ATELIER_ARTIFACTS_STAGING_URL", ""), "with --cluster: the staging store of ray steps' artifacts as this worker opens it, e.g. s3://bucket?region=…&prefix=atelier-staging/; needs --artifacts-staging-uri and an artifact store (ATELIER_ARTIFACTS_STAGING_URL)")
	fs.StringVar(&c.ArtifactsStagingURI, "artifacts-staging-uri", env("ATELIER_ARTIFACTS_STAGING_URI", ""), "with --cluster: the same place as the cluster's pods name it, e.g. s3://bucket/atelier-staging: Ray jobs get $ATELIER_INPUTS_URI and $ATELIER_ARTIFACTS_URI under it and reach it with their own identity (ATELIER_ARTIFACTS_STAGING_URI)")
	fs.StringVar(&c.KueueQueue, "kueue-queue", env("ATELIER_KUEUE_QUEUE", d.KueueQueue), "with --cluster: the cluster runs Kueue; submit Jobs and RayJobs to this LocalQueue (in every project namespace) and let Kueue admit them instead of Atelier (ATELIER_KUEUE_QUEUE)")
	fs.IntVar(&c.KubeBurst, "kube-burst", c.envInt("ATELIER_KUBE_BURST", d.KubeBurst), "API server request burst (ATELIER_KUBE_BURST)")
}

// ValidateCluster checks the settings of a cluster worker (Cluster set), on
// top of Validate.
func (c *Config) ValidateCluster() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if !catalog.ValidClusterName(c.Cluster) {
		return fmt.Errorf("cluster name %q: use lowercase letters, digits and '-', starting with a letter, at most 63 characters", c.Cluster)
	}
	if g := c.KubeGateway; g != "" {
		ns, name, found := strings.Cut(g, "/")
		if !found {
			ns, name = "", g
		}
		var errs []string
		if found {
			errs = append(errs, validation.IsDNS1123Label(ns)...)
		}
		errs = append(errs, validation.IsDNS1123Subdomain(name)...)
		if len(errs) > 0 {
			return fmt.Errorf("--gateway %q: want namespace/name of a Gateway: %s", g, strings.Join(errs, "; "))
		}
	}
	if u := c.LauncherGatewayURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("--launcher-gateway-url %q: want the gateway's http(s) URL as pods reach it", u)
		}
	}
	switch {
	case (c.ArtifactsStagingURL == "") != (c.ArtifactsStagingURI == ""):
		return errors.New("--artifacts-staging-url and --artifacts-staging-uri go together: how this worker opens the staging store, and how the cluster's pods name it")
	case c.ArtifactsStagingURL != "" && c.ArtifactsURL == "":
		return errors.New("--artifacts-staging-url needs an artifact store (--artifacts-url): staged outputs are stored there")
	}
	if q := c.KueueQueue; q != "" {
		// The name is a label value on every object and a LocalQueue name.
		if errs := append(validation.IsDNS1123Subdomain(q), validation.IsValidLabelValue(q)...); len(errs) > 0 {
			return fmt.Errorf("--kueue-queue %q is not a LocalQueue name: %s", q, strings.Join(errs, "; "))
		}
	}
	keys := make([]string, 0, len(c.ClusterLabels))
	for k := range c.ClusterLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if msg := catalog.ClusterLabelProblem(k, c.ClusterLabels[k]); msg != "" {
			return fmt.Errorf("cluster label %s=%s: %s", k, c.ClusterLabels[k], msg)
		}
	}
	if c.KubeNamespaceTemplate == "" {
		return fmt.Errorf("kube namespace template is empty; use e.g. atelier-{project}")
	}
	if c.KubeQPS <= 0 || c.KubeBurst < 1 {
		return fmt.Errorf("kube QPS and burst must be positive")
	}
	return nil
}

// Validate reports the first missing or malformed setting.
func (c *Config) Validate() error {
	if err := c.EnvError(); err != nil {
		return err
	}
	if c.DatabaseURL == "" {
		return fmt.Errorf("no database: set --database-url or ATELIER_DATABASE_URL (or use `atelier dev`, which finds or starts one)")
	}
	if c.TemporalHostPort == "" || c.Namespace == "" || c.TaskQueue == "" {
		return fmt.Errorf("temporal address, namespace and task queue are required")
	}
	if c.WorkerConcurrency < 1 {
		return fmt.Errorf("worker concurrency must be at least 1")
	}
	if c.StreamLimit < 1 {
		return fmt.Errorf("stream limit must be at least 1")
	}
	if c.TokenCacheTTL < 0 || c.TokenCacheTTL > time.Minute {
		return fmt.Errorf("token cache TTL %s: want 0 (no cache) up to 1m, the bound on revocation", c.TokenCacheTTL)
	}
	if c.Retention < 0 {
		return fmt.Errorf("retention must not be negative (0 keeps finished runs forever)")
	}
	if c.Retention > 0 && c.Retention < time.Hour {
		return fmt.Errorf("retention %s is under an hour: finished runs would vanish while people still look at them; use at least 1h (0 keeps them forever)", c.Retention)
	}
	return nil
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func (c *Config) envInt(key string, def int) int {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: not an integer", key, v))
		return def
	}
	return n
}

func (c *Config) envBytes(key string, def int64) int64 {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def
	}
	var n byteSize
	if err := n.Set(v); err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: %v", key, v, err))
		return def
	}
	return int64(n)
}

// byteSize is a flag of bytes written as a Kubernetes quantity: 500Gi,
// 10G, 1048576.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *byteSize) Type() string   { return "bytes" }
func (b *byteSize) Set(v string) error {
	q, err := resource.ParseQuantity(strings.TrimSpace(v))
	if err != nil || q.Sign() < 0 {
		return fmt.Errorf("not a size in bytes (like 500Gi, 10G or 1048576)")
	}
	*b = byteSize(q.Value())
	return nil
}

func (c *Config) envBool(key string, def bool) bool {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: not a boolean (true or false)", key, v))
		return def
	}
	return b
}

func (c *Config) envFloat32(key string, def float32) float32 {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 32)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: not a number", key, v))
		return def
	}
	return float32(f)
}

// envMap parses "k=v,k2=v2"; nil when the variable is unset or empty.
func (c *Config) envMap(key string) map[string]string {
	v := os.Getenv(key)
	if v == "" {
		return nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: want k=v pairs separated by commas", key, v))
			return nil
		}
		out[k] = val
	}
	return out
}

func (c *Config) envDuration(key string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: not a duration (e.g. 20s, 1m30s)", key, v))
		return def
	}
	return d
}

// EnvError reports every ATELIER_* environment variable that is set but
// cannot be parsed, or nil. Commands check it before doing anything.
func (c *Config) EnvError() error {
	if len(c.envErrs) == 0 {
		return nil
	}
	return fmt.Errorf("bad environment: %w", errors.Join(c.envErrs...))
}

// envList reads a comma-separated list from the environment.
func envList(key string) []string {
	v := env(key, "")
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}
