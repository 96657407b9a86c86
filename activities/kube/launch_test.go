package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// memArtifacts is an artifact store holding objects by digest.
type memArtifacts struct{ b *blob.Bucket }

func newMemArtifacts(t *testing.T) memArtifacts {
	b := memblob.OpenBucket(nil)
	t.Cleanup(func() { _ = b.Close() })
	return memArtifacts{b}
}

// put stores data and returns its digest.
func (m memArtifacts) put(t *testing.T, data string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(data))
	d := "sha256:" + hex.EncodeToString(sum[:])
	must(t, m.b.WriteAll(context.Background(), d, []byte(data), nil))
	return d
}

func (m memArtifacts) Reader(ctx context.Context, _ string, digest string) (*blob.Reader, error) {
	return m.b.NewReader(ctx, digest, nil)
}

func testLauncher(t *testing.T) Launcher {
	t.Helper()
	key, err := secretbox.NewLocalKeyURL()
	must(t, err)
	box, err := secretbox.Open(context.Background(), key)
	must(t, err)
	return Launcher{Image: "atelier:dev", Gateway: "http://gw:8080", Box: box}
}

// A container that declared metrics runs under the launcher even without
// artifacts (it stores the metrics file); one with neither does not; nor
// do other kinds.
func TestLaunches(t *testing.T) {
	metrics := jobRequest("fit")
	metrics.Metrics = true
	artifacts := jobRequest("fit")
	artifacts.Outputs = []pipeline.ArtifactOutput{{Name: "model"}}
	ray := rayRequest("train")
	ray.Metrics = true
	for _, tc := range []struct {
		name string
		req  activities.KubeStepRequest
		want bool
	}{
		{"neither metrics nor artifacts", jobRequest("fit"), false},
		{"metrics", metrics, true},
		{"artifacts", artifacts, true},
		{"a ray step", ray, false},
	} {
		if got := launches(tc.req); got != tc.want {
			t.Errorf("%s: launches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A worker that cannot collect a step's declared metrics fails it before
// anything is created, naming metrics and what it lacks: the launcher, or
// the artifact store it would read them from.
func TestDeclaredMetricsNeedTheLauncherAndTheStore(t *testing.T) {
	ctx := context.Background()
	req := jobRequest("fit")
	req.Metrics = true

	_, err := fakeBackend(t, fakeClients()).RunKubeStep(ctx, req)
	invalidStep(t, err, "the step declares metrics but the worker of cluster fake cannot collect them from its pod (the launcher stores $ATELIER_METRICS): it lacks [a launcher image (ATELIER_LAUNCHER_IMAGE)")
	invalidStep(t, err, "an artifact store to read them from (ATELIER_ARTIFACTS_URL)]")

	clients := fakeClients()
	_, err = fakeBackend(t, clients, WithLauncher(testLauncher(t))).RunKubeStep(ctx, req)
	invalidStep(t, err, "it lacks [an artifact store to read them from (ATELIER_ARTIFACTS_URL)]")
	if nss, _ := clients.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); len(nss.Items) != 0 {
		t.Errorf("namespaces created: %v", nss.Items)
	}

	// A step with artifacts still says it has artifacts.
	req.Outputs = []pipeline.ArtifactOutput{{Name: "model"}}
	_, err = fakeBackend(t, fakeClients()).RunKubeStep(ctx, req)
	invalidStep(t, err, "the step has artifacts but the worker of cluster fake cannot hand them to a pod")
}

// A Job step without artifacts that declared metrics runs under the
// launcher: its pod gets the launcher's init container, its command runs
// under `atelier-launcher run`, the grant comes from the attempt's
// Secret, and the metrics file the launcher stored is read back into the
// result, as a launched step's is. A step that declared none (and has no
// artifacts) runs its command as it is.
func TestDeclaredMetricsRunUnderTheLauncher(t *testing.T) {
	k := startCluster(t)
	store := newMemArtifacts(t)
	b := k.backend(WithLauncher(testLauncher(t)), WithArtifactReader(store))

	req := jobRequest("fit")
	req.Metrics = true
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	out := newRunner(t, b, nil).runStep(req)
	j := k.waitJob(name)
	ps := j.Spec.Template.Spec
	if len(ps.InitContainers) != 1 || ps.InitContainers[0].Name != framework.LauncherInit || ps.InitContainers[0].Image != "atelier:dev" {
		t.Fatalf("init containers %+v: the launcher's", ps.InitContainers)
	}
	c := ps.Containers[0]
	if want := []string{launch.Binary, "run", "--", "python", "fit.py"}; !cmp.Equal(c.Command, want) {
		t.Errorf("command %q, want %q", c.Command, want)
	}
	var grantFrom string
	for _, e := range c.Env {
		if e.Name == launch.GrantEnv && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			grantFrom = e.ValueFrom.SecretKeyRef.Name
		}
	}
	sec, err := k.clients.Kube.CoreV1().Secrets(k.ns).Get(ctxT(t), grantFrom, metav1.GetOptions{})
	if err != nil || len(sec.Data[launch.GrantKey]) == 0 {
		t.Fatalf("the attempt's Secret %q holds no grant: %v", grantFrom, err)
	}

	file := `{"accuracy": 0.91, "loss": [0.7, 0.4, 0.2]}`
	msg, err := json.Marshal(launch.Result{Launcher: launch.ResultVersion, Outputs: json.RawMessage(`{"trained":true}`),
		Metrics: &launch.Stored{Name: "metrics", Digest: store.put(t, file), Size: int64(len(file))}})
	must(t, err)
	k.setPodStatus(k.jobPod(j), terminated(0, string(msg)))
	complete(k, name)
	o := wait(t, out)
	if o.err != nil {
		t.Fatal(o.err)
	}
	want := &runstate.Metrics{Scalars: map[string]float64{"accuracy": 0.91}, Series: map[string][]float64{"loss": {0.7, 0.4, 0.2}}}
	if !cmp.Equal(o.res.Metrics, want) || o.res.Outputs["trained"] != true {
		t.Errorf("result metrics %+v, outputs %v; want %+v", o.res.Metrics, o.res.Outputs, want)
	}

	// Neither metrics nor artifacts: no launcher, no grant.
	req = jobRequest("report")
	name = framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	out = newRunner(t, b, nil).runStep(req)
	j = k.waitJob(name)
	ps = j.Spec.Template.Spec
	if len(ps.InitContainers) != 0 || !cmp.Equal(ps.Containers[0].Command, []string{"python", "fit.py"}) {
		t.Errorf("init containers %+v, command %q: the step runs as it is", ps.InitContainers, ps.Containers[0].Command)
	}
	if slices.ContainsFunc(ps.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == launch.GrantEnv || e.Name == launch.SpecEnv }) {
		t.Errorf("env %+v: no launcher's spec or grant", ps.Containers[0].Env)
	}
	k.setPodStatus(k.jobPod(j), terminated(0, `{"done": true}`))
	complete(k, name)
	if o := wait(t, out); o.err != nil || o.res.Outputs["done"] != true || o.res.Metrics != nil {
		t.Errorf("result %+v, %v", o.res, o.err)
	}
}

// complete plays the Job controller marking Job name complete.
func complete(k *cluster, name string) {
	now := metav1.Now()
	k.setJobStatus(name, func(s *batchv1.JobStatus) {
		s.StartTime, s.CompletionTime, s.Succeeded = &now, &now, 1
		s.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	})
}
