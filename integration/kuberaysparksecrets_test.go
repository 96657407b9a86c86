package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sparkv1beta2 "github.com/kubeflow/spark-operator/v2/api/v1beta2"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
	"github.com/atelier-ml/atelier/pipeline"
)

// Project secrets of a ray step and a spark step on the real control plane
// (API server, controllers, the real KubeRay operator, kwok nodes; the
// Spark operator simulated). The test plays what reads the values on a
// real cluster: the kubelet of every pod of the RayJob (head, worker,
// submitter), resolving secretKeyRefs and the files volume from the API as
// a kubelet does, and spark-submit and the kubelet for the
// SparkApplication (envSecretKeyRefs, the pod templates' volume). Each
// attempt's Secret exists while its step runs and holds the values; the
// RayJob, its RayCluster and pods and the SparkApplication only name it;
// the values are in neither REST, Temporal history nor the steps'
// outputs (redacted); each Secret is gone once its attempt ended.
func TestRaySparkSecretsOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane")
	}
	var (
		mu sync.Mutex
		// step/role → what its pods get: "env:VAR" or "file:NAME" → value.
		resolved = map[string]map[string]string{}
		held     = map[string]map[string][]byte{}       // step → its attempt's Secret's data, read while it ran
		owners   = map[string][]metav1.OwnerReference{} // step → its attempt's Secret's owners
		names    = map[string]string{}                  // step → its attempt's Secret
		objects  = map[string][]byte{}                  // what the API server held for the steps, while they ran
		problems []string
		e        *kubeEnv
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	// secret reads a Secret as a kubelet would, once its owner is written
	// (the worker makes the object the Secret's owner just after creating
	// it, and a fast pod may start first).
	secret := func(ctx context.Context, ns, name string) (*corev1.Secret, error) {
		var sec *corev1.Secret
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if sec, err = e.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || len(sec.OwnerReferences) > 0 {
				break
			}
		}
		return sec, err
	}
	record := func(step string, sec *corev1.Secret) {
		mu.Lock()
		defer mu.Unlock()
		held[step], owners[step], names[step] = sec.Data, sec.OwnerReferences, sec.Name
	}
	// kubelet resolves what container of spec gets from Secrets: its
	// secretKeyRef variables and the files of secret volumes mounted at
	// $ATELIER_SECRETS.
	kubelet := func(ctx context.Context, step, ns string, spec corev1.PodSpec, container string) map[string]string {
		out := map[string]string{}
		for _, c := range spec.Containers {
			if c.Name != container {
				continue
			}
			for _, env := range c.Env {
				if ref := env.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
					sec, err := secret(ctx, ns, ref.SecretKeyRef.Name)
					if err != nil {
						fail("%s: %v", step, err)
						continue
					}
					record(step, sec)
					out["env:"+env.Name] = string(sec.Data[ref.SecretKeyRef.Key])
				}
			}
			for _, m := range c.VolumeMounts {
				if m.MountPath != pipeline.SecretsDir {
					continue
				}
				for _, v := range spec.Volumes {
					if v.Name != m.Name || v.Secret == nil {
						continue
					}
					sec, err := secret(ctx, ns, v.Secret.SecretName)
					if err != nil {
						fail("%s: %v", step, err)
						continue
					}
					for _, it := range v.Secret.Items {
						out["file:"+it.Path] = string(sec.Data[it.Key])
					}
				}
			}
		}
		return out
	}
	// The submitter pod of the ray step: the RayJob's cluster is up, so
	// every pod of the job can be read.
	play := func(p kubetest.PodRef) kubetest.Exit {
		ctx := context.Background()
		if p.Kind != "rayjob" {
			return kubetest.Exit{Code: 9, Message: "not a ray submitter"}
		}
		pod, err := e.kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return kubetest.Exit{Code: 7, Message: err.Error()}
		}
		rj, err := e.ray.RayV1().RayJobs(p.Namespace).Get(ctx, p.Labels["job-name"], metav1.GetOptions{})
		if err != nil {
			return kubetest.Exit{Code: 7, Message: err.Error()}
		}
		got := map[string]map[string]string{"train/submitter": kubelet(ctx, "train", p.Namespace, pod.Spec, "ray-job-submitter")}
		rc, err := e.ray.RayV1().RayClusters(p.Namespace).Get(ctx, rj.Status.RayClusterName, metav1.GetOptions{})
		if err != nil {
			return kubetest.Exit{Code: 7, Message: err.Error()}
		}
		pods, err := e.kube.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "ray.io/cluster=" + rc.Name})
		if err != nil {
			return kubetest.Exit{Code: 7, Message: err.Error()}
		}
		for _, cp := range pods.Items {
			role := cp.Labels["ray.io/node-type"]
			got["train/"+role] = kubelet(ctx, "train", p.Namespace, cp.Spec, "ray-"+role)
		}
		js, _ := json.Marshal([]any{rj, rc, pods, pod})
		mu.Lock()
		for k, v := range got {
			resolved[k] = v
		}
		objects["train"] = js
		mu.Unlock()
		// The driver, on the head, echoes the value it got.
		out, _ := json.Marshal(map[string]string{"echo": got["train/head"]["env:HF_TOKEN"]})
		return kubetest.Exit{After: 500 * time.Millisecond, Message: string(out)}
	}
	// The SparkApplication: spark-submit turns envSecretKeyRefs into
	// secretKeyRefs of the driver and executor pods, which also get their
	// templates' volumes.
	sparkPlay := func(ref kubetest.ObjectRef) kubetest.Scenario {
		ctx := context.Background()
		app, err := e.spark.SparkoperatorV1beta2().SparkApplications(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return kubetest.Scenario{Outcome: kubetest.Fail, Message: err.Error()}
		}
		got := map[string]map[string]string{}
		for role, r := range map[string]struct {
			spec      sparkv1beta2.SparkPodSpec
			container string
		}{"driver": {app.Spec.Driver.SparkPodSpec, "spark-kubernetes-driver"}, "executor": {app.Spec.Executor.SparkPodSpec, "spark-kubernetes-executor"}} {
			spec := corev1.PodSpec{Containers: []corev1.Container{{Name: r.container}}}
			if r.spec.Template != nil {
				spec = *r.spec.Template.Spec.DeepCopy()
			}
			for env, nk := range r.spec.EnvSecretKeyRefs {
				spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: nk.Name}, Key: nk.Key}}})
			}
			got["etl/"+role] = kubelet(ctx, "etl", ref.Namespace, spec, r.container)
		}
		js, _ := json.Marshal(app)
		mu.Lock()
		for k, v := range got {
			resolved[k] = v
		}
		objects["etl"] = js
		mu.Unlock()
		out, _ := json.Marshal(map[string]string{"echo": got["etl/driver"]["env:DB_PASSWORD"], "file": got["etl/executor"]["file:creds.json"]})
		return kubetest.Scenario{Outcome: kubetest.Succeed, Delay: 500 * time.Millisecond, Outputs: string(out)}
	}
	e = newKubeEnv(t, func(string) kubetest.Exit { return kubetest.Exit{} }, true, stackOptions{podScript: play, sparkScript: sparkPlay})

	nano := time.Now().UnixNano()
	values := map[string]string{
		"hf-token":    fmt.Sprintf("hf-kube-%d", nano),
		"db-password": fmt.Sprintf("db-kube-%d", nano),
		"gcp-sa":      fmt.Sprintf(`{"private_key": "sa-kube-%d"}`, nano),
	}
	for name, v := range values {
		b, _ := json.Marshal(map[string]string{"value": v})
		code, body := e.raw("PUT", e.path("/secrets/%s", name), b)
		require.Equal(t, 201, code, "%s", body)
	}
	notIn := func(where, text string) {
		t.Helper()
		for name, v := range values {
			assert.NotContains(t, text, v, "the value of %s is in %s", name, where)
		}
	}
	e.createPipeline("kube-ray-spark-secrets", `
steps:
  - name: train
    kind: ray
    ray:
      entrypoint: python train.py
      image: rayproject/ray:2.9.0
      workers: [{name: cpu, replicas: 1}]
      secrets:
        - {name: hf-token, env: HF_TOKEN}
        - {name: gcp-sa, file: creds.json}
  - name: etl
    kind: spark
    spark:
      type: Python
      image: spark:3.5.0
      sparkVersion: "3.5.0"
      mainApplicationFile: local:///opt/etl.py
      executor: {instances: 2}
      secrets:
        - {name: db-password, env: DB_PASSWORD}
        - {name: gcp-sa, file: creds.json}
`)
	id := e.start("kube-ray-spark-secrets", nil)
	r := e.waitTerminal(id, 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))

	mu.Lock()
	assert.Empty(t, problems)
	ray := map[string]string{"env:HF_TOKEN": values["hf-token"], "file:creds.json": values["gcp-sa"]}
	for _, role := range []string{"train/head", "train/worker", "train/submitter"} {
		assert.Equal(t, ray, resolved[role], "what the %s pod gets", role)
	}
	spark := map[string]string{"env:DB_PASSWORD": values["db-password"], "file:creds.json": values["gcp-sa"]}
	for _, role := range []string{"etl/driver", "etl/executor"} {
		assert.Equal(t, spark, resolved[role], "what the %s pods get", role)
	}
	assert.Equal(t, map[string][]byte{"hf-token": []byte(values["hf-token"]), "gcp-sa": []byte(values["gcp-sa"])}, held["train"],
		"the ray attempt's Secret, while it ran")
	assert.Equal(t, map[string][]byte{"db-password": []byte(values["db-password"]), "gcp-sa": []byte(values["gcp-sa"])}, held["etl"],
		"the spark attempt's Secret, while it ran")
	for step, want := range map[string]metav1.TypeMeta{"train": {APIVersion: "ray.io/v1", Kind: "RayJob"},
		"etl": {APIVersion: "sparkoperator.k8s.io/v1beta2", Kind: "SparkApplication"}} {
		if assert.Len(t, owners[step], 1, "%s: the attempt's Secret is owned by its object", step) {
			assert.Equal(t, want, metav1.TypeMeta{APIVersion: owners[step][0].APIVersion, Kind: owners[step][0].Kind}, step)
		}
		require.NotEmpty(t, objects[step], step)
		notIn(step+"'s objects on the API server", string(objects[step]))
		assert.Contains(t, string(objects[step]), names[step], "%s's objects name the attempt's Secret", step)
	}
	secretNames := []string{names["train"], names["etl"]}
	mu.Unlock()

	train, _ := stepByName(r, "train").Outputs.(map[string]any)
	assert.Equal(t, "[secret hf-token]", train["echo"], "the ray step's outputs are redacted")
	etl, _ := stepByName(r, "etl").Outputs.(map[string]any)
	assert.Equal(t, map[string]any{"echo": "[secret db-password]", "file": "[secret gcp-sa]"}, etl, "the spark step's outputs are redacted")

	// Gone once the attempts ended.
	for _, name := range secretNames {
		require.Eventually(t, func() bool {
			_, err := e.kube.CoreV1().Secrets(e.namespace).Get(context.Background(), name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, 30*time.Second, 200*time.Millisecond, "the attempt's Secret %s outlived it", name)
	}

	// Not in Temporal or REST.
	notIn("temporal workflow show", payloadsDecoded(t, temporalCLI(t, e.stack, "workflow", "show", "--workflow-id", id, "--output", "json")))
	notIn("temporal workflow describe", payloadsDecoded(t, temporalCLI(t, e.stack, "workflow", "describe", "--workflow-id", id, "--output", "json")))
	for _, p := range []string{"/runs/" + id, "/runs", "/runs/" + id + "/steps/train/logs", "/runs/" + id + "/steps/etl/logs"} {
		code, body := e.raw("GET", e.path("%s", p), nil)
		require.Equal(t, 200, code, "GET %s: %s", p, body)
		notIn("GET "+p, string(body))
	}
	// The spec holds the references, never the values.
	code, body := e.raw("GET", e.path("/pipelines/kube-ray-spark-secrets/versions/1"), nil)
	require.Equal(t, 200, code, "%s", body)
	notIn("the pipeline's version", string(body))
	for _, name := range []string{"hf-token", "db-password", "gcp-sa"} {
		assert.Contains(t, string(body), name, "the spec names %s", name)
	}
}
