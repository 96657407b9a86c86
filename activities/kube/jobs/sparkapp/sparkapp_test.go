package sparkapp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/schema"

	sparkv1beta2 "github.com/kubeflow/spark-operator/v2/api/v1beta2"

	sparkfake "github.com/kubeflow/spark-operator/v2/pkg/client/clientset/versioned/fake"
	"go.temporal.io/sdk/temporal"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/activities/kube/jobs/sparkapp"
)

func step(s *pipeline.SparkStep) framework.Step {
	req := activities.KubeStepRequest{Project: "p", RunID: "r", Step: "etl", Attempt: 3, Kind: activities.KubeSparkApp, Spark: s}
	id := framework.Identity{Project: "p", Run: "r", Step: "etl", Attempt: 3}
	return framework.Step{
		Request: req,
		Meta:    metav1.ObjectMeta{Name: "etl-a3-0123456789", Namespace: "atelier-p", Labels: id.Labels()},
		Env:     framework.StepEnv(req),
	}
}

func app() *pipeline.SparkStep {
	return &pipeline.SparkStep{
		Type:                "Scala",
		Image:               "spark:3.5.5",
		SparkVersion:        "3.5.5",
		MainClass:           "org.example.ETL",
		MainApplicationFile: "local:///opt/app/etl.jar",
		Arguments:           []string{"--day", "2025-01-01"},
		SparkConf:           map[string]string{"spark.sql.shuffle.partitions": "64"},
		Driver:              pipeline.SparkRole{Cores: 1, Memory: "2g"},
		Executor:            pipeline.SparkRole{Cores: 4, Memory: "8g", Instances: 3, GPU: 1, GPUType: "NVIDIA-L4"},
	}
}

func TestBuild(t *testing.T) {
	obj, err := sparkapp.New(sparkfake.NewSimpleClientset()).Build(step(app()))
	if err != nil {
		t.Fatal(err)
	}
	a := obj.(*sparkv1beta2.SparkApplication)
	s := a.Spec
	if s.Type != sparkv1beta2.SparkApplicationTypeScala || s.Mode != sparkv1beta2.DeployModeCluster || *s.Image != "spark:3.5.5" ||
		s.SparkVersion != "3.5.5" || *s.MainClass != "org.example.ETL" || *s.MainApplicationFile != "local:///opt/app/etl.jar" ||
		s.Arguments[1] != "2025-01-01" || s.SparkConf["spark.sql.shuffle.partitions"] != "64" {
		t.Errorf("spec %+v", s)
	}
	if s.RestartPolicy.Type != sparkv1beta2.RestartPolicyNever {
		t.Errorf("restart policy %+v", s.RestartPolicy)
	}
	d, e := s.Driver, s.Executor
	if *d.Cores != 1 || *d.Memory != "2g" || d.GPU != nil || d.Labels[framework.LabelAttempt] != "3" {
		t.Errorf("driver %+v", d)
	}
	if *e.Cores != 4 || *e.Memory != "8g" || *e.Instances != 3 || e.GPU == nil || e.GPU.Name != "nvidia.com/gpu" || e.GPU.Quantity != 1 ||
		e.NodeSelector[framework.GPUProductKey] != "NVIDIA-L4" {
		t.Errorf("executor %+v", e)
	}
	for _, role := range []sparkv1beta2.SparkPodSpec{d.SparkPodSpec, e.SparkPodSpec} {
		if role.EnvVars["ATELIER_OUTPUTS"] != "/dev/termination-log" || role.EnvVars["ATELIER_STEP"] != "etl" {
			t.Errorf("env %v", role.EnvVars)
		}
	}
	// Unset sizes stay unset (the CRD's minimum is 1).
	minimal := &pipeline.SparkStep{Type: "Python", Image: "spark", MainApplicationFile: "local:///a.py"}
	obj, _ = sparkapp.New(sparkfake.NewSimpleClientset()).Build(step(minimal))
	a = obj.(*sparkv1beta2.SparkApplication)
	if a.Spec.Driver.Cores != nil || a.Spec.Executor.Instances != nil || a.Spec.MainClass != nil {
		t.Errorf("defaults %+v", a.Spec)
	}
}

func TestBuildInvalid(t *testing.T) {
	for _, tc := range []struct {
		s    *pipeline.SparkStep
		want string
	}{
		{&pipeline.SparkStep{Type: "Python", MainApplicationFile: "x"}, "spark.image"},
		{&pipeline.SparkStep{Type: "Python", Image: "spark"}, "spark.mainApplicationFile"},
	} {
		_, err := sparkapp.New(sparkfake.NewSimpleClientset()).Build(step(tc.s))
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !strings.Contains(app.Message(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}

func TestProgress(t *testing.T) {
	k := sparkapp.New(sparkfake.NewSimpleClientset())
	end := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	for _, tc := range []struct {
		state sparkv1beta2.ApplicationStateType
		phase framework.Phase
	}{
		{sparkv1beta2.ApplicationStateNew, framework.Pending},
		{sparkv1beta2.ApplicationStateSubmitted, framework.Pending},
		{sparkv1beta2.ApplicationStateRunning, framework.Running},
		{sparkv1beta2.ApplicationStatePendingRerun, framework.Running},
		{sparkv1beta2.ApplicationStateInvalidating, framework.Running},
		{sparkv1beta2.ApplicationStateSucceeding, framework.Running},
		{sparkv1beta2.ApplicationStateFailing, framework.Running},
		{sparkv1beta2.ApplicationStateUnknown, framework.Running},
		{sparkv1beta2.ApplicationStateCompleted, framework.Succeeded},
		{sparkv1beta2.ApplicationStateFailed, framework.Failed},
		{sparkv1beta2.ApplicationStateFailedSubmission, framework.Failed},
	} {
		a := &sparkv1beta2.SparkApplication{ObjectMeta: metav1.ObjectMeta{Name: "etl", Namespace: "ns"}, Status: sparkv1beta2.SparkApplicationStatus{
			AppState:        sparkv1beta2.ApplicationState{State: tc.state, ErrorMessage: "driver OOMKilled"},
			DriverInfo:      sparkv1beta2.DriverInfo{PodName: "etl-driver", WebUIAddress: "10.0.0.7:4040"},
			TerminationTime: end,
		}}
		p := k.Progress(a, nil)
		if p.Phase != tc.phase {
			t.Errorf("%q: phase %v, want %v", tc.state, p.Phase, tc.phase)
		}
		if p.Phase == framework.Failed && (p.Reason != string(tc.state) || p.Message != "driver OOMKilled") {
			t.Errorf("%q: reason %q message %q", tc.state, p.Reason, p.Message)
		}
		if p.Links["sparkUI"] != "http://10.0.0.7:4040" || p.Links["logs"] != "kubectl logs -n ns etl-driver" {
			t.Errorf("links %v", p.Links)
		}
	}
	// The ingress address wins over the pod address.
	a := &sparkv1beta2.SparkApplication{Status: sparkv1beta2.SparkApplicationStatus{DriverInfo: sparkv1beta2.DriverInfo{
		WebUIAddress: "10.0.0.7:4040", WebUIIngressAddress: "https://spark.example.com/etl"}}}
	if ui := k.Progress(a, nil).Links["sparkUI"]; ui != "https://spark.example.com/etl" {
		t.Errorf("sparkUI %q", ui)
	}
}

func TestOutputPods(t *testing.T) {
	op := sparkapp.New(sparkfake.NewSimpleClientset()).OutputPods(&sparkv1beta2.SparkApplication{ObjectMeta: metav1.ObjectMeta{Name: "etl-a3-x"}})
	if op.Selector != "sparkoperator.k8s.io/app-name=etl-a3-x,spark-role=driver" || op.Container != "spark-kubernetes-driver" {
		t.Errorf("%+v", op)
	}
}

func TestBuildPinsGPUExecutorsToAdmittedNodes(t *testing.T) {
	st := step(app())
	st.Request.Nodes = []string{"l4-1", "l4-2"}
	obj, err := sparkapp.New(sparkfake.NewSimpleClientset()).Build(st)
	if err != nil {
		t.Fatal(err)
	}
	a := obj.(*sparkv1beta2.SparkApplication).Spec
	if diff := cmp.Diff(framework.NodeAffinity([]string{"l4-1", "l4-2"}), a.Executor.Affinity); diff != "" {
		t.Errorf("executor affinity (-want +got):\n%s", diff)
	}
	if a.Driver.Affinity != nil {
		t.Error("the driver, which asks for no GPU, was pinned")
	}
}

// Kueue has no SparkApplication integration: Spark steps keep Atelier's
// own admission on a Kueue cluster.
func TestNotSuspendable(t *testing.T) {
	var k framework.Kind = sparkapp.New(nil)
	if _, ok := k.(framework.Suspendable); ok {
		t.Fatal("SparkApplication must not be queued in Kueue")
	}
}

// Pod settings reach the driver and executors through pod templates (the
// step's under each role's, then the cluster's defaults), which also carry
// the GPU request and node selector the webhook would have set; without
// settings or defaults there is no template and nothing changes.
func TestBuildPodSettings(t *testing.T) {
	k := sparkapp.New(sparkfake.NewSimpleClientset())
	obj, err := k.Build(step(app()))
	if err != nil {
		t.Fatal(err)
	}
	if a := obj.(*sparkv1beta2.SparkApplication); a.Spec.Driver.Template != nil || a.Spec.Executor.Template != nil || len(k.PodTemplates(a)) != 0 {
		t.Fatal("templates without pod settings")
	}

	s := app()
	s.Pod = &schema.Pod{ServiceAccountName: "spark", Labels: map[string]string{"team": "etl"}}
	s.Executor.Pod = &schema.Pod{Tolerations: []schema.Toleration{{Key: "gpu", Operator: "Exists"}},
		Volumes: []schema.Volume{{Name: "scratch", MountPath: "/scratch", EmptyDir: &schema.EmptyDir{}}}}
	st := step(s)
	st.PodDefaults = &schema.Pod{PriorityClassName: "batch"}
	obj, err = k.Build(st)
	if err != nil {
		t.Fatal(err)
	}
	a := obj.(*sparkv1beta2.SparkApplication)
	d, e := a.Spec.Driver.Template, a.Spec.Executor.Template
	if d == nil || e == nil {
		t.Fatalf("templates: driver %v, executor %v", d, e)
	}
	for role, tm := range map[string]*corev1.PodTemplateSpec{"driver": d, "executor": e} {
		if tm.Spec.ServiceAccountName != "spark" || tm.Labels["team"] != "etl" || tm.Spec.PriorityClassName != "batch" || tm.Labels[framework.LabelRun] != "r" {
			t.Errorf("%s template %+v", role, tm)
		}
	}
	if len(d.Spec.Tolerations) != 0 || len(e.Spec.Tolerations) != 1 {
		t.Errorf("the executor's toleration is its own: driver %v, executor %v", d.Spec.Tolerations, e.Spec.Tolerations)
	}
	c := e.Spec.Containers[0]
	if c.Name != sparkapp.ExecutorContainer || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/scratch" {
		t.Errorf("executor container %+v", c)
	}
	if q := c.Resources.Limits[corev1.ResourceName("nvidia.com/gpu")]; q.Value() != 1 || e.Spec.NodeSelector["nvidia.com/gpu.product"] != "NVIDIA-L4" {
		t.Errorf("the GPU request and selector are not in the executor template: %+v / %v", c.Resources, e.Spec.NodeSelector)
	}
	if got := len(k.PodTemplates(a)); got != 2 {
		t.Errorf("PodTemplates: %d", got)
	}

	// A bad quantity is the user's error, naming the role.
	s.Driver.Pod = &schema.Pod{Volumes: []schema.Volume{{Name: "x", MountPath: "/x", EmptyDir: &schema.EmptyDir{SizeLimit: "lots"}}}}
	if _, err := k.Build(step(s)); err == nil || !strings.Contains(err.Error(), "spark.driver pods") {
		t.Errorf("bad size limit: %v", err)
	}
}

// A spark step's secret variables are the SparkApplication's
// envSecretKeyRefs for the driver and the executors (the operator hands
// them to spark-submit, which writes the secretKeyRefs into the pods), and
// its files a read-only volume of the attempt's Secret (0400, one item per
// file) in both roles' pod templates, made for them even without pod
// settings; ATELIER_SECRETS travels with the other variables. The native
// secrets field (the whole Secret mounted) stays unused.
func TestBuildSecrets(t *testing.T) {
	k := sparkapp.New(sparkfake.NewSimpleClientset())
	s := app()
	s.Secrets = []pipeline.SecretEnv{{Name: "db-password", Env: "DB_PASSWORD"}, {Name: "gcp-sa", File: "creds.json"}}
	st := step(s)
	st.SecretName = "etl-a3-0123456789-secrets"
	obj, err := k.Build(st)
	if err != nil {
		t.Fatal(err)
	}
	a := obj.(*sparkv1beta2.SparkApplication)
	for role, r := range map[string]struct {
		spec      *sparkv1beta2.SparkPodSpec
		container string
	}{
		"driver":   {&a.Spec.Driver.SparkPodSpec, sparkapp.DriverContainer},
		"executor": {&a.Spec.Executor.SparkPodSpec, sparkapp.ExecutorContainer},
	} {
		ps := r.spec
		want := map[string]sparkv1beta2.NameKey{"DB_PASSWORD": {Name: st.SecretName, Key: "db-password"}}
		if !cmp.Equal(ps.EnvSecretKeyRefs, want) {
			t.Errorf("%s envSecretKeyRefs %v", role, ps.EnvSecretKeyRefs)
		}
		if ps.EnvVars["ATELIER_SECRETS"] != pipeline.SecretsDir || ps.EnvVars["ATELIER_STEP"] != "etl" {
			t.Errorf("%s envVars %v", role, ps.EnvVars)
		}
		if _, ok := ps.EnvVars["DB_PASSWORD"]; ok || len(ps.Secrets) != 0 || len(ps.Env) != 0 {
			t.Errorf("%s: the secret travels elsewhere too: envVars %v, secrets %v, env %v", role, ps.EnvVars, ps.Secrets, ps.Env)
		}
		tm := ps.Template
		if tm == nil {
			t.Errorf("%s: no pod template for the secret files", role)
			continue
		}
		if len(tm.Spec.Volumes) != 1 || tm.Spec.Volumes[0].Secret == nil {
			t.Fatalf("%s volumes %+v", role, tm.Spec.Volumes)
		}
		src := tm.Spec.Volumes[0].Secret
		if src.SecretName != st.SecretName || ptr.Deref(src.DefaultMode, 0) != 0o400 ||
			!cmp.Equal(src.Items, []corev1.KeyToPath{{Key: "gcp-sa", Path: "creds.json"}}) {
			t.Errorf("%s secret volume %+v", role, src)
		}
		c := tm.Spec.Containers[0]
		if c.Name != r.container || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != pipeline.SecretsDir || !c.VolumeMounts[0].ReadOnly {
			t.Errorf("%s container %+v", role, c)
		}
		if tm.Labels[framework.LabelRun] != "r" {
			t.Errorf("%s template labels %v", role, tm.Labels)
		}
	}
	// The webhook skips a templated role: what it would have applied is in
	// the template (the executor's GPU and node selector).
	e := a.Spec.Executor.Template
	if q := e.Spec.Containers[0].Resources.Limits[corev1.ResourceName("nvidia.com/gpu")]; q.Value() != 1 || e.Spec.NodeSelector["nvidia.com/gpu.product"] != "NVIDIA-L4" {
		t.Errorf("executor template lost the GPU: %+v / %v", e.Spec.Containers[0].Resources, e.Spec.NodeSelector)
	}

	// Variables only: no template (the webhook keeps mutating the pods),
	// no ATELIER_SECRETS.
	s.Secrets = s.Secrets[:1]
	obj, err = k.Build(st)
	if err != nil {
		t.Fatal(err)
	}
	a = obj.(*sparkv1beta2.SparkApplication)
	if a.Spec.Driver.Template != nil || a.Spec.Executor.Template != nil || len(a.Spec.Driver.EnvSecretKeyRefs) != 1 || len(a.Spec.Executor.EnvSecretKeyRefs) != 1 {
		t.Errorf("variables only: templates %v %v, refs %v %v", a.Spec.Driver.Template, a.Spec.Executor.Template, a.Spec.Driver.EnvSecretKeyRefs, a.Spec.Executor.EnvSecretKeyRefs)
	}
	if _, ok := a.Spec.Driver.EnvVars["ATELIER_SECRETS"]; ok {
		t.Error("ATELIER_SECRETS without files")
	}

	// Files with pod settings: one template each, with both.
	s.Secrets = []pipeline.SecretEnv{{Name: "gcp-sa", File: "creds.json"}}
	s.Pod = &schema.Pod{ServiceAccountName: "spark"}
	obj, err = k.Build(st)
	if err != nil {
		t.Fatal(err)
	}
	d := obj.(*sparkv1beta2.SparkApplication).Spec.Driver.Template
	if d == nil || d.Spec.ServiceAccountName != "spark" || len(d.Spec.Volumes) != 1 || d.Spec.Volumes[0].Secret == nil {
		t.Errorf("driver template %+v", d)
	}

	// Without references nothing of it.
	obj, err = k.Build(step(app()))
	if err != nil {
		t.Fatal(err)
	}
	a = obj.(*sparkv1beta2.SparkApplication)
	if a.Spec.Driver.EnvSecretKeyRefs != nil || a.Spec.Executor.EnvSecretKeyRefs != nil || a.Spec.Driver.Template != nil {
		t.Errorf("no secrets: %+v", a.Spec)
	}
}
