package config

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func parse(t *testing.T, args ...string) Config {
	t.Helper()
	var c Config
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.Bind(fs)
	c.BindWorker(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWorkerFlags(t *testing.T) {
	t.Setenv("KUBECONFIG", "/from/kubeconfig")
	c := parse(t, "--database-url", "postgres://x", "--cluster", "gpu-east")
	if c.Cluster != "gpu-east" || c.ClusterLabels != nil || c.Kubeconfig != "/from/kubeconfig" ||
		c.KubeNamespaceTemplate != "atelier-{project}" || c.KubeQPS != 100 || c.KubeBurst != 200 {
		t.Fatalf("%+v", c)
	}
	if err := c.ValidateCluster(); err != nil {
		t.Fatal(err)
	}

	t.Setenv("ATELIER_KUBECONFIG", "/from/atelier")
	t.Setenv("ATELIER_CLUSTER_LABELS", "tier=gpu,region=east")
	t.Setenv("ATELIER_KUBE_QPS", "50.5")
	c = parse(t, "--database-url", "postgres://x", "--cluster", "gpu-east")
	if c.Kubeconfig != "/from/atelier" || c.ClusterLabels["region"] != "east" || len(c.ClusterLabels) != 2 || c.KubeQPS != 50.5 {
		t.Fatalf("%+v", c)
	}
	// Flags replace the environment's labels rather than merging with them.
	c = parse(t, "--cluster", "gpu-east", "--cluster-label", "tier=cpu", "--cluster-label", "zone=a", "--kube-context", "prod")
	if len(c.ClusterLabels) != 2 || c.ClusterLabels["tier"] != "cpu" || c.ClusterLabels["zone"] != "a" || c.KubeContext != "prod" {
		t.Fatalf("%+v", c.ClusterLabels)
	}
}

func TestLocalEngines(t *testing.T) {
	if c := parse(t); c.LocalEngines != nil {
		t.Fatalf("default %v, want none", c.LocalEngines)
	}
	t.Setenv("ATELIER_LOCAL_ENGINES", "triton=/opt/tritonserver")
	if c := parse(t); c.LocalEngines["triton"] != "/opt/tritonserver" || len(c.LocalEngines) != 1 {
		t.Fatalf("from the environment: %v", c.LocalEngines)
	}
	c := parse(t, "--local-engine", "vllm=/bin/modelserver", "--local-engine", "triton=/bin/fake-triton")
	if c.LocalEngines["vllm"] != "/bin/modelserver" || c.LocalEngines["triton"] != "/bin/fake-triton" || len(c.LocalEngines) != 2 {
		t.Fatalf("from flags: %v", c.LocalEngines)
	}
}

func TestValidateClusterAcceptsGatewayAndKueue(t *testing.T) {
	for _, g := range []string{"infra/public", "public"} {
		c := parse(t, "--database-url", "postgres://x", "--cluster", "east", "--gateway", g, "--kueue-queue", "team-q")
		if err := c.ValidateCluster(); err != nil {
			t.Errorf("--gateway %s: %v", g, err)
		}
	}
}

func TestValidateClusterAcceptsAStagingStore(t *testing.T) {
	c := parse(t, "--database-url", "postgres://x", "--cluster", "east", "--artifacts-url", "mem://",
		"--artifacts-staging-url", "s3://lake?prefix=atelier-staging/", "--artifacts-staging-uri", "s3://lake/atelier-staging")
	if err := c.ValidateCluster(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateCluster(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "GPU"}, "cluster name"},
		{[]string{"--cluster", "east", "--cluster-label", "bad key=x"}, "cluster label"},
		{[]string{"--cluster", "east", "--kube-namespace-template", ""}, "namespace template"},
		{[]string{"--cluster", "east", "--kube-burst", "0"}, "positive"},
		{[]string{"--cluster", "east", "--gateway", "infra/Bad_Name"}, "--gateway"},
		{[]string{"--cluster", "east", "--kueue-queue", "Team Q"}, "--kueue-queue"},
		{[]string{"--cluster", "east", "--artifacts-url", "mem://", "--artifacts-staging-url", "s3://lake"}, "--artifacts-staging-url and --artifacts-staging-uri go together"},
		{[]string{"--cluster", "east", "--artifacts-staging-url", "s3://lake", "--artifacts-staging-uri", "s3://lake"}, "needs an artifact store (--artifacts-url)"},
	} {
		c := parse(t, append([]string{"--database-url", "postgres://x"}, tc.args...)...)
		if err := c.ValidateCluster(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestMalformedEnvironmentIsAnErrorNamingTheVariable(t *testing.T) {
	for _, tc := range []struct{ key, val string }{
		{"ATELIER_WORKER_CONCURRENCY", "x"},
		{"ATELIER_SHUTDOWN_TIMEOUT", "20"},
		{"ATELIER_KUBE_QPS", "fast"},
		{"ATELIER_KUBE_BURST", "1.5"},
		{"ATELIER_CLUSTER_LABELS", "tier"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			t.Setenv(tc.key, tc.val)
			c := parse(t, "--database-url", "postgres://x")
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.key)
			}
			if c.EnvError() == nil {
				t.Fatal("EnvError() = nil")
			}
		})
	}
	// Set but empty means "not set": the default applies.
	t.Setenv("ATELIER_WORKER_CONCURRENCY", "")
	if c := parse(t, "--database-url", "postgres://x"); c.Validate() != nil || c.WorkerConcurrency != Default().WorkerConcurrency {
		t.Fatalf("empty variable: %+v", c)
	}
}

func TestExamplesAreOffUnlessAsked(t *testing.T) {
	if c := parse(t, "--database-url", "postgres://x"); c.Examples {
		t.Fatal("a production worker serves the examples by default")
	}
	t.Setenv("ATELIER_EXAMPLES", "true")
	if c := parse(t, "--database-url", "postgres://x"); !c.Examples {
		t.Fatal("ATELIER_EXAMPLES=true ignored")
	}
}

func TestRetention(t *testing.T) {
	if c := parse(t, "--database-url", "postgres://x"); c.Retention != 0 || c.Validate() != nil {
		t.Fatalf("default retention %s, %v; want 0 (keep forever), valid", c.Retention, c.Validate())
	}
	t.Setenv("ATELIER_RETENTION", "720h")
	if c := parse(t, "--database-url", "postgres://x"); c.Retention.Hours() != 720 || c.Validate() != nil {
		t.Fatalf("ATELIER_RETENTION=720h: %s, %v", c.Retention, c.Validate())
	}
	for _, bad := range []string{"-1h", "10m"} {
		if c := parse(t, "--database-url", "postgres://x", "--retention", bad); c.Validate() == nil {
			t.Errorf("--retention %s accepted", bad)
		}
	}
}
