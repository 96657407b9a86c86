package sparkapp

import (
	"maps"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/schema"

	sparkv1beta2 "github.com/kubeflow/spark-operator/v2/api/v1beta2"

	sparkclientset "github.com/kubeflow/spark-operator/v2/pkg/client/clientset/versioned"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// Labels the spark-operator puts on an application's pods, and the name of
// the driver's container.
const (
	AppNameLabel      = "sparkoperator.k8s.io/app-name"
	RoleLabel         = "spark-role"
	DriverContainer   = "spark-kubernetes-driver"
	ExecutorContainer = "spark-kubernetes-executor"
)

// Kind is the SparkApplication integration.
type Kind struct {
	framework.Typed[*sparkv1beta2.SparkApplication, *sparkv1beta2.SparkApplicationList]
}

var (
	_ framework.Kind      = (*Kind)(nil)
	_ framework.Templated = (*Kind)(nil)
	_ framework.Versioned = (*Kind)(nil)
)

// Integration registers spark steps (activities.KubeSparkApp) on clusters
// running the spark-operator.
var Integration = framework.Integration{
	StepKind: activities.KubeSparkApp,
	Requires: "the spark-operator",
	New: func(c framework.Clients) (framework.Kind, []framework.Resource, bool) {
		if c.Spark == nil {
			return nil, nil, false
		}
		return New(c.Spark), nil, true
	},
}

// New returns the SparkApplication integration over a spark-operator
// clientset.
func New(spark sparkclientset.Interface) *Kind {
	return &Kind{framework.NewTyped("SparkApplication", "sparkapplication",
		func(ns string) framework.Client[*sparkv1beta2.SparkApplication, *sparkv1beta2.SparkApplicationList] {
			return spark.SparkoperatorV1beta2().SparkApplications(ns)
		})}
}

// APIVersion implements framework.Versioned: the attempt's Secret is
// owned by its SparkApplication.
func (*Kind) APIVersion() string { return sparkv1beta2.SchemeGroupVersion.String() }

// MaxNameLength implements framework.Kind. The operator shortens the names
// it derives (driver pod, UI service) by itself.
func (*Kind) MaxNameLength() int { return 63 }

// WatchPods implements framework.Kind: the operator reports driver
// failures in the application's state.
func (*Kind) WatchPods() bool { return false }

// Build implements framework.Kind. Fields the CRD validates itself (type,
// cores, instances) are passed through: the API server's message then
// names the field precisely.
func (k *Kind) Build(step framework.Step) (framework.Object, error) {
	s := step.Request.Spark
	if s == nil {
		return nil, framework.Invalid("a %s step needs a spark section", activities.KubeSparkApp)
	}
	if s.Image == "" {
		return nil, framework.Invalid("spark.image: a spark step on Kubernetes needs an image")
	}
	if s.MainApplicationFile == "" {
		return nil, framework.Invalid("spark.mainApplicationFile: a spark step needs the application file (e.g. local:///opt/app/main.py)")
	}
	// Checked at validation too; here for specs stored before the check.
	for _, k := range slices.Sorted(maps.Keys(s.SparkConf)) {
		if why := pipeline.ReservedSparkConf(k); why != "" {
			return nil, framework.Invalid("spark.sparkConf: %s", why)
		}
	}
	env := framework.EnvMap(step.Env)
	if framework.HasSecretFiles(s.Secrets) && step.SecretName != "" {
		env["ATELIER_SECRETS"] = pipeline.SecretsDir
	}
	app := &sparkv1beta2.SparkApplication{
		ObjectMeta: step.ObjectMeta(),
		Spec: sparkv1beta2.SparkApplicationSpec{
			Type:                sparkv1beta2.SparkApplicationType(s.Type),
			Mode:                sparkv1beta2.DeployModeCluster,
			Image:               ptr.To(s.Image),
			SparkVersion:        s.SparkVersion,
			MainApplicationFile: ptr.To(s.MainApplicationFile),
			Arguments:           s.Arguments,
			SparkConf:           maps.Clone(s.SparkConf),
			RestartPolicy:       sparkv1beta2.RestartPolicy{Type: sparkv1beta2.RestartPolicyNever},
			Driver:              sparkv1beta2.DriverSpec{SparkPodSpec: podSpec(s.Driver, step, env)},
			Executor:            sparkv1beta2.ExecutorSpec{SparkPodSpec: podSpec(s.Executor, step, env)},
		},
	}
	for _, r := range []struct {
		role      string
		container string
		spec      *sparkv1beta2.SparkPodSpec
		own       *schema.Pod
	}{
		{"driver", DriverContainer, &app.Spec.Driver.SparkPodSpec, s.Driver.Pod},
		{"executor", ExecutorContainer, &app.Spec.Executor.SparkPodSpec, s.Executor.Pod},
	} {
		if err := template(r.spec, r.container, schema.MergePod(s.Pod, r.own), step); err != nil {
			return nil, framework.Invalid("spark.%s pods: %v", r.role, err)
		}
	}
	if s.MainClass != "" {
		app.Spec.MainClass = ptr.To(s.MainClass)
	}
	if s.Executor.Instances != 0 {
		app.Spec.Executor.Instances = ptr.To(s.Executor.Instances)
	}
	return app, nil
}

func podSpec(r pipeline.SparkRole, step framework.Step, env map[string]string) sparkv1beta2.SparkPodSpec {
	p := sparkv1beta2.SparkPodSpec{
		Labels: step.PodLabels(),
		// Deprecated in favour of env, which only the webhook applies;
		// envVars travel as spark-submit configuration instead.
		EnvVars:          maps.Clone(env),
		EnvSecretKeyRefs: secretKeyRefs(step.Request.Spark.Secrets, step.SecretName),
		NodeSelector:     framework.GPUNodeSelector(r.GPUType),
	}
	if r.Cores != 0 {
		p.Cores = ptr.To(r.Cores)
	}
	if r.Memory != "" {
		p.Memory = ptr.To(r.Memory)
	}
	if r.GPU != 0 {
		p.GPU = &sparkv1beta2.GPUSpec{Name: string(framework.GPUResource), Quantity: int64(r.GPU)}
		// Pinned to the nodes GPU admission chose, if it ran.
		p.Affinity = framework.NodeAffinity(step.Request.Nodes)
	}
	return p
}

// secretKeyRefs are the step's secret variables as the SparkApplication's
// envSecretKeyRefs: variable -> {the attempt's Secret, the project
// secret's name}. The spark-operator passes them to spark-submit as
// spark.kubernetes.{driver,executor}.secretKeyRef.<VAR>=<secret>:<key>,
// and Spark itself writes the secretKeyRef into the pod, template or not:
// no webhook is involved, and no value is in the object.
func secretKeyRefs(refs []pipeline.SecretEnv, secretName string) map[string]sparkv1beta2.NameKey {
	if secretName == "" {
		return nil
	}
	var out map[string]sparkv1beta2.NameKey
	for _, r := range refs {
		if r.Env == "" {
			continue
		}
		if out == nil {
			out = map[string]sparkv1beta2.NameKey{}
		}
		out[r.Env] = sparkv1beta2.NameKey{Name: secretName, Key: r.Name}
	}
	return out
}

// template gives a role's pods their settings through a pod template (the
// SparkApplication's native fields have no tolerations, priority class or
// patch), made only when there are settings: the user's p or the
// cluster's defaults, or secret files. The spark-operator hands the
// template to spark-submit (Spark 3 and later) and then skips its webhook
// for that role, so what podSpec set natively for the webhook (the GPU
// request, the node selector, the pinning to admitted nodes) is written
// into the template too.
//
// Secret files are the template's volume of the attempt's Secret with
// only the referenced keys, at their file names, 0400 (as for a container
// step): the native secrets field (spark.kubernetes.*.secrets.<name>)
// would mount the whole Secret, every value under its secret's name.
func template(ps *sparkv1beta2.SparkPodSpec, container string, p *schema.Pod, step framework.Step) error {
	refs := step.Request.Spark.Secrets
	files := framework.HasSecretFiles(refs) && step.SecretName != ""
	if p == nil && step.PodDefaults == nil && !files {
		return nil
	}
	t := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(ps.Labels)},
		Spec: corev1.PodSpec{
			NodeSelector: maps.Clone(ps.NodeSelector),
			Affinity:     ps.Affinity.DeepCopy(),
			Containers:   []corev1.Container{{Name: container}},
		},
	}
	if ps.GPU != nil {
		q := *resource.NewQuantity(ps.GPU.Quantity, resource.DecimalSI)
		t.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(ps.GPU.Name): q}
	}
	if vol, mount, ok := framework.SecretFilesVolume(refs, step.SecretName); ok {
		t.Spec.Volumes = append(t.Spec.Volumes, vol)
		t.Spec.Containers[0].VolumeMounts = append(t.Spec.Containers[0].VolumeMounts, mount)
	}
	if err := step.SettlePod(t, container, p); err != nil {
		return err
	}
	ps.Template = t
	return nil
}

// PodTemplates implements framework.Templated: the driver's and the
// executors' templates, where pod settings made them.
func (*Kind) PodTemplates(obj framework.Object) []framework.PodTemplate {
	a := obj.(*sparkv1beta2.SparkApplication)
	var out []framework.PodTemplate
	if t := a.Spec.Driver.Template; t != nil {
		out = append(out, framework.PodTemplate{Role: "driver", Template: t})
	}
	if t := a.Spec.Executor.Template; t != nil {
		out = append(out, framework.PodTemplate{Role: "executor", Template: t})
	}
	return out
}

// Progress implements framework.Kind: applicationState COMPLETED is
// success; FAILED and SUBMISSION_FAILED are failures with errorMessage;
// everything else ("", SUBMITTED, RUNNING, PENDING_RERUN, INVALIDATING,
// SUCCEEDING, FAILING, UNKNOWN) is transient — SUCCEEDING and FAILING are
// the operator's way station before the final state.
func (k *Kind) Progress(obj framework.Object, _ []*corev1.Pod) framework.Progress {
	a := obj.(*sparkv1beta2.SparkApplication)
	st := a.Status
	driver := st.DriverInfo.PodName
	if driver == "" {
		driver = a.Name + "-driver"
	}
	p := framework.Progress{Links: map[string]string{"logs": "kubectl logs -n " + a.Namespace + " " + driver}}
	ui := st.DriverInfo.WebUIIngressAddress
	if ui == "" {
		ui = st.DriverInfo.WebUIAddress
	}
	if ui != "" {
		if !strings.Contains(ui, "://") {
			ui = "http://" + ui
		}
		p.Links["sparkUI"] = ui
	}
	if !st.TerminationTime.IsZero() {
		p.FinishedAt = st.TerminationTime.Time
	}
	switch st.AppState.State {
	case sparkv1beta2.ApplicationStateCompleted:
		p.Phase = framework.Succeeded
	case sparkv1beta2.ApplicationStateFailed, sparkv1beta2.ApplicationStateFailedSubmission:
		p.Phase = framework.Failed
		p.Reason = string(st.AppState.State)
		p.Message = st.AppState.ErrorMessage
	case sparkv1beta2.ApplicationStateNew, sparkv1beta2.ApplicationStateSubmitted:
		p.Phase = framework.Pending
	default:
		p.Phase = framework.Running
	}
	return p
}

// OutputPods implements framework.Kind: the driver pod.
func (k *Kind) OutputPods(obj framework.Object) framework.OutputPods {
	return framework.OutputPods{
		Selector:  AppNameLabel + "=" + obj.GetName() + "," + RoleLabel + "=driver",
		Container: DriverContainer,
	}
}
