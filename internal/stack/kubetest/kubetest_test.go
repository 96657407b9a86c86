package kubetest_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	sparkv1beta2 "github.com/kubeflow/spark-operator/v2/api/v1beta2"
	sparkclient "github.com/kubeflow/spark-operator/v2/pkg/client/clientset/versioned"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestAPIServerUp(t *testing.T) {
	c := kubetest.Start(t)
	t.Logf("etcd + kube-apiserver ready in %s, CRDs established in %s", c.StartupTime, c.CRDTime)

	v, err := c.Clientset().Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != kubetest.KubeVersion {
		t.Errorf("server version %s, want %s", v.GitVersion, kubetest.KubeVersion)
	}

	// The kubeconfig file must work on its own, for code that takes a path.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Get(ctx(t), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("via kubeconfig: %v", err)
	}

	// Without the token a request is rejected: anonymous auth is off, so
	// AlwaysAllow authorizes only the test's own identity.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(c.Host() + "/api/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("request without token: HTTP %d, want 401", resp.StatusCode)
	}
}

func TestCRDsEstablished(t *testing.T) {
	c := kubetest.Start(t)
	client := apiextensionsclient.NewForConfigOrDie(c.RESTConfig())
	for _, name := range kubetest.CRDs {
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		established := false
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			t.Errorf("%s not established: %+v", name, crd.Status.Conditions)
		}
		for _, v := range crd.Spec.Versions {
			if v.Storage && v.Subresources.Status == nil {
				t.Errorf("%s %s has no status subresource", name, v.Name)
			}
		}
	}
}

// newRayJob is a minimal RayJob that passes the v1.6.0 schema.
func newRayJob(ns, name string) *rayv1.RayJob {
	return &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: rayv1.RayJobSpec{
			Entrypoint:               "python -c 'print(1)'",
			ShutdownAfterJobFinishes: true,
			RayClusterSpec: &rayv1.RayClusterSpec{
				RayVersion: "2.46.0",
				HeadGroupSpec: rayv1.HeadGroupSpec{
					RayStartParams: map[string]string{},
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.46.0"}},
					}},
				},
			},
		},
	}
}

func TestRayJobCreate(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t)
	ray := rayclient.NewForConfigOrDie(c.RESTConfig())

	created, err := ray.RayV1().RayJobs(ns).Create(ctx(t), newRayJob(ns, "train"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ray.RayV1().RayJobs(ns).Get(ctx(t), "train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != created.UID || got.Spec.Entrypoint != "python -c 'print(1)'" {
		t.Errorf("round trip: got %+v", got.Spec)
	}
	// CRD defaulting ran, as it would on a real cluster.
	if got.Spec.SubmissionMode != rayv1.K8sJobMode {
		t.Errorf("submissionMode = %q, want the CRD default %q", got.Spec.SubmissionMode, rayv1.K8sJobMode)
	}
	// No operator runs: the status stays empty until a test writes it.
	if got.Status.JobDeploymentStatus != "" {
		t.Errorf("status written by nobody: %+v", got.Status)
	}
}

func TestRayJobSchemaViolation(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t)
	dyn := dynamic.NewForConfigOrDie(c.RESTConfig())
	rayjobs := dyn.Resource(schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayjobs"}).Namespace(ns)

	for _, tc := range []struct {
		name      string
		field     string // set in spec
		value     any
		wantInMsg []string
	}{
		// OpenAPI type check.
		{"wrong type", "entrypoint", int64(42), []string{"spec.entrypoint", "string"}},
		// CEL rule (x-kubernetes-validations) on the field.
		{"CEL rule", "managedBy", "someone-else", []string{"spec.managedBy", "ray.io/kuberay-operator"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "ray.io/v1",
				"kind":       "RayJob",
				"metadata":   map[string]any{"name": "bad"},
				"spec":       map[string]any{"entrypoint": "python x.py", tc.field: tc.value},
			}}
			_, err := rayjobs.Create(ctx(t), obj, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("err = %v, want Invalid", err)
			}
			t.Logf("rejected: %v", err)
			var se *apierrors.StatusError
			if !errors.As(err, &se) || se.ErrStatus.Code != http.StatusUnprocessableEntity {
				t.Fatalf("err = %#v, want HTTP 422", err)
			}
			for _, s := range tc.wantInMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

// TestRayJobStatus plays the KubeRay operator: status is written through the
// status subresource, and each half of the object ignores writes to the other.
func TestRayJobStatus(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t)
	jobs := rayclient.NewForConfigOrDie(c.RESTConfig()).RayV1().RayJobs(ns)

	job, err := jobs.Create(ctx(t), newRayJob(ns, "train"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := metav1.NewTime(time.Now().Truncate(time.Second))
	job.Status = rayv1.RayJobStatus{
		JobId:               "train-abc12",
		RayClusterName:      "train-raycluster-xyz",
		JobStatus:           rayv1.JobStatusRunning,
		JobDeploymentStatus: rayv1.JobDeploymentStatusRunning,
		StartTime:           &start,
	}
	job.Spec.Entrypoint = "ignored by the status subresource"
	updated, err := jobs.UpdateStatus(ctx(t), job, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Status.JobStatus != rayv1.JobStatusRunning || updated.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusRunning ||
		!updated.Status.StartTime.Equal(&start) {
		t.Errorf("status after UpdateStatus: %+v", updated.Status)
	}
	if updated.Spec.Entrypoint != "python -c 'print(1)'" {
		t.Errorf("UpdateStatus changed spec.entrypoint to %q", updated.Spec.Entrypoint)
	}

	// A spec update carrying a different status leaves the status alone.
	updated.Status.JobStatus = rayv1.JobStatusFailed
	updated.Spec.Suspend = true
	again, err := jobs.Update(ctx(t), updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Status.JobStatus != rayv1.JobStatusRunning || !again.Spec.Suspend {
		t.Errorf("after Update: suspend=%v status=%s", again.Spec.Suspend, again.Status.JobStatus)
	}

	// A merge patch on the status subresource works too, and status is
	// schema-validated like spec.
	status := dynamic.NewForConfigOrDie(c.RESTConfig()).
		Resource(schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayjobs"}).Namespace(ns)
	patched, err := status.Patch(ctx(t), "train", types.MergePatchType,
		[]byte(`{"status":{"jobStatus":"SUCCEEDED","succeeded":1}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(patched.Object, "status", "jobStatus"); got != "SUCCEEDED" {
		t.Errorf("status.jobStatus after patch = %q", got)
	}
	_, err = status.Patch(ctx(t), "train", types.MergePatchType,
		[]byte(`{"status":{"succeeded":"all of them"}}`), metav1.PatchOptions{}, "status")
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.succeeded") {
		t.Errorf("status patch with a string count: err = %v, want Invalid naming status.succeeded", err)
	}
}

func TestSparkApplication(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t)
	apps := sparkclient.NewForConfigOrDie(c.RESTConfig()).SparkoperatorV1beta2().SparkApplications(ns)

	app, err := apps.Create(ctx(t), &sparkv1beta2.SparkApplication{
		ObjectMeta: metav1.ObjectMeta{Name: "etl"},
		Spec: sparkv1beta2.SparkApplicationSpec{
			Type:                sparkv1beta2.SparkApplicationTypePython,
			Mode:                sparkv1beta2.DeployModeCluster,
			SparkVersion:        "3.5.5",
			Image:               ptr.To("spark:3.5.5"),
			MainApplicationFile: ptr.To("local:///opt/spark/examples/src/main/python/pi.py"),
			Driver:              sparkv1beta2.DriverSpec{SparkPodSpec: sparkv1beta2.SparkPodSpec{Cores: ptr.To[int32](1), Memory: ptr.To("512m")}},
			Executor:            sparkv1beta2.ExecutorSpec{SparkPodSpec: sparkv1beta2.SparkPodSpec{Cores: ptr.To[int32](1), Memory: ptr.To("512m")}, Instances: ptr.To[int32](2)},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	app.Status = sparkv1beta2.SparkApplicationStatus{
		SparkApplicationID: "spark-0123456789",
		SubmissionID:       "sub-1",
		AppState:           sparkv1beta2.ApplicationState{State: sparkv1beta2.ApplicationStateRunning},
		DriverInfo:         sparkv1beta2.DriverInfo{PodName: "etl-driver"},
		ExecutorState:      map[string]sparkv1beta2.ExecutorState{"etl-exec-1": sparkv1beta2.ExecutorStateRunning},
		SubmissionAttempts: 1,
	}
	if _, err := apps.UpdateStatus(ctx(t), app, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := apps.Get(ctx(t), "etl", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.AppState.State != sparkv1beta2.ApplicationStateRunning || got.Status.DriverInfo.PodName != "etl-driver" ||
		got.Status.ExecutorState["etl-exec-1"] != sparkv1beta2.ExecutorStateRunning {
		t.Errorf("status: %+v", got.Status)
	}

	// An enum violation is rejected by the CRD schema, naming the field.
	bad := app.DeepCopy()
	bad.ObjectMeta = metav1.ObjectMeta{Name: "rust"}
	bad.Spec.Type = "Rust"
	_, err = apps.Create(ctx(t), bad, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.type") {
		t.Errorf("type Rust: err = %v, want Invalid naming spec.type", err)
	}
}

func TestBatchJob(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t)
	jobs := c.Clientset().BatchV1().Jobs(ns)

	_, err := jobs.Create(ctx(t), &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "fit"},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "main", Image: "python:3.12", Command: []string{"python", "-c", "print(1)"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := jobs.Get(ctx(t), "fit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Built-in defaulting ran (a real apiserver, not a fake clientset)...
	if got.Spec.Completions == nil || *got.Spec.Completions != 1 || got.Spec.Template.Spec.Containers[0].TerminationMessagePath == "" {
		t.Errorf("Job not defaulted: %+v", got.Spec)
	}
	// ...and no controller did: no pods, no status.
	if got.Status.Active != 0 || got.Status.StartTime != nil {
		t.Errorf("Job has status with no controller running: %+v", got.Status)
	}
	pods, err := c.Clientset().CoreV1().Pods(ns).List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods exist; nothing should have created any", len(pods.Items))
	}
}

func TestNamespacesAreSeparate(t *testing.T) {
	c := kubetest.Start(t)
	a, b := c.Namespace(t), c.Namespace(t)
	if a == b || !strings.HasPrefix(a, "t-testnamespacesareseparate-") {
		t.Errorf("namespaces %q and %q", a, b)
	}
	ray := rayclient.NewForConfigOrDie(c.RESTConfig()).RayV1()
	if _, err := ray.RayJobs(a).Create(ctx(t), newRayJob(a, "same-name"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ray.RayJobs(b).Create(ctx(t), newRayJob(b, "same-name"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("same name in another namespace: %v", err)
	}
	list, err := ray.RayJobs(a).List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%s holds %d RayJobs, want 1", a, len(list.Items))
	}
}
