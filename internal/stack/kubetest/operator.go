package kubetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	sparkv1beta2 "github.com/kubeflow/spark-operator/v2/api/v1beta2"
	sparkclient "github.com/kubeflow/spark-operator/v2/pkg/client/clientset/versioned"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"
)

// Outcome is how a simulated workload ends.
type Outcome int

// Outcomes.
const (
	Succeed Outcome = iota
	Fail
	Hang // stays running until deleted
)

// Scenario scripts one object's life: a few transient states, then Outcome
// after Delay. Outputs becomes the output pod's termination message.
type Scenario struct {
	Outcome Outcome
	Delay   time.Duration
	Outputs string
	Reason  string
	Message string
}

// ObjectRef identifies an object the operator saw.
type ObjectRef struct {
	Kind, Namespace, Name string
	Labels                map[string]string
}

// Operator plays, for tests, the controllers a real cluster runs and this
// apiserver does not: KubeRay (RayJob, RayCluster), the Spark operator, the
// Job controller, the kubelet (output pods with termination messages) and
// the garbage collector (it clears the foregroundDeletion finalizer of
// objects being deleted). It acts only on objects labelled
// atelier.dev/managed-by=atelier, through the status subresource, as the
// real controllers do.
type Operator struct {
	kube  kubernetes.Interface
	ray   rayclient.Interface
	spark sparkclient.Interface
	// Script picks the scenario of each new object (default: succeed after
	// 200ms with outputs {"ok":true}).
	Script func(ObjectRef) Scenario

	// kinds limits what it plays (nil: everything); gc says whether it
	// also plays the garbage collector.
	kinds []string
	gc    bool
	// schedulerName is set on the pods it creates, so that on a cluster
	// with a scheduler and kwok nobody else acts on them.
	schedulerName string

	mu      sync.Mutex
	started map[types.UID]bool
	uids    map[string]map[types.UID]bool // attempt key -> UIDs ever created
}

const managedSelector = "atelier.dev/managed-by=atelier"

// NewOperator connects to the cluster.
func NewOperator(cfg *rest.Config) (*Operator, error) {
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	r, err := rayclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s, err := sparkclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Operator{kube: k, ray: r, spark: s, gc: true, started: map[types.UID]bool{}, uids: map[string]map[types.UID]bool{}}, nil
}

// NewSparkOperator returns an Operator for a StartControlPlane cluster,
// where the real Job controller, KubeRay and garbage collector run: it plays
// only the Spark operator (SparkApplications), and the driver pods it makes
// carry a scheduler name no scheduler serves, so kwok never runs them.
func NewSparkOperator(cfg *rest.Config) (*Operator, error) {
	o, err := NewOperator(cfg)
	if err != nil {
		return nil, err
	}
	o.kinds, o.gc, o.schedulerName = []string{"sparkapp"}, false, "kubetest-spark-operator"
	return o, nil
}

// Run watches all namespaces until ctx ends.
func (o *Operator) Run(ctx context.Context) {
	kinds := []struct {
		kind string
		w    func(context.Context, metav1.ListOptions) (watch.Interface, error)
	}{
		{"rayjob", func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			return o.ray.RayV1().RayJobs("").Watch(ctx, lo)
		}},
		{"raycluster", func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			return o.ray.RayV1().RayClusters("").Watch(ctx, lo)
		}},
		{"sparkapp", func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			return o.spark.SparkoperatorV1beta2().SparkApplications("").Watch(ctx, lo)
		}},
		{"job", func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			return o.kube.BatchV1().Jobs("").Watch(ctx, lo)
		}},
	}
	for _, k := range kinds {
		if o.kinds != nil && !slices.Contains(o.kinds, k.kind) {
			continue
		}
		go o.watchLoop(ctx, k.kind, k.w)
	}
}

// ObjectsPerAttempt returns, per step attempt (run/step/item/attempt), how
// many distinct objects (UIDs) were ever created for it.
func (o *Operator) ObjectsPerAttempt() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, v := range o.uids {
		out[k] = len(v)
	}
	return out
}

func (o *Operator) watchLoop(ctx context.Context, kind string, w func(context.Context, metav1.ListOptions) (watch.Interface, error)) {
	for ctx.Err() == nil {
		wi, err := w(ctx, metav1.ListOptions{LabelSelector: managedSelector})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for ev := range wi.ResultChan() {
			obj, ok := ev.Object.(metav1.Object)
			if !ok {
				continue
			}
			o.observe(ctx, kind, obj)
		}
	}
}

func (o *Operator) observe(ctx context.Context, kind string, obj metav1.Object) {
	ref := ObjectRef{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Labels: obj.GetLabels()}
	if obj.GetDeletionTimestamp() != nil {
		o.collect(ctx, ref, obj.GetFinalizers())
		return
	}
	o.mu.Lock()
	if kind != "raycluster" {
		key := fmt.Sprintf("%s/%s/%s/%s", ref.Labels["atelier.dev/run"], ref.Labels["atelier.dev/step"], ref.Labels["atelier.dev/item"], ref.Labels["atelier.dev/attempt"])
		if o.uids[key] == nil {
			o.uids[key] = map[types.UID]bool{}
		}
		o.uids[key][obj.GetUID()] = true
	}
	first := !o.started[obj.GetUID()]
	o.started[obj.GetUID()] = true
	o.mu.Unlock()
	if !first {
		return
	}
	sc := Scenario{Outcome: Succeed, Delay: 200 * time.Millisecond, Outputs: `{"ok":true}`}
	if o.Script != nil {
		sc = o.Script(ref)
	}
	go o.play(ctx, ref, sc)
}

// collect is the garbage collector's part: with no dependents to wait for,
// foreground deletion can finish at once.
func (o *Operator) collect(ctx context.Context, ref ObjectRef, finalizers []string) {
	if !o.gc || !slices.Contains(finalizers, metav1.FinalizerDeleteDependents) {
		return
	}
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	var err error
	switch ref.Kind {
	case "rayjob":
		_, err = o.ray.RayV1().RayJobs(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	case "raycluster":
		_, err = o.ray.RayV1().RayClusters(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	case "sparkapp":
		_, err = o.spark.SparkoperatorV1beta2().SparkApplications(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	case "job":
		_, err = o.kube.BatchV1().Jobs(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	_ = err // NotFound: already gone
}

func (o *Operator) play(ctx context.Context, ref ObjectRef, sc Scenario) {
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	switch ref.Kind {
	case "raycluster":
		_ = o.updateRayCluster(ctx, ref, func(s *rayv1.RayClusterStatus) { s.State = rayv1.Ready })
		return
	case "rayjob":
		// KubeRay's transient states come first; none of them is a failure.
		for _, st := range []func(*rayv1.RayJobStatus){
			func(s *rayv1.RayJobStatus) { s.JobDeploymentStatus = rayv1.JobDeploymentStatusInitializing },
			func(s *rayv1.RayJobStatus) {
				s.JobDeploymentStatus, s.JobStatus = rayv1.JobDeploymentStatusRunning, rayv1.JobStatusPending
				s.DashboardURL = ref.Name + "-head-svc." + ref.Namespace + ".svc:8265"
			},
			func(s *rayv1.RayJobStatus) { s.JobStatus = rayv1.JobStatusRunning },
		} {
			if o.updateRayJob(ctx, ref, st) != nil || !sleep(20*time.Millisecond) {
				return
			}
		}
	case "sparkapp":
		if o.updateSpark(ctx, ref, func(s *sparkv1beta2.SparkApplicationStatus) {
			s.AppState.State = sparkv1beta2.ApplicationStateRunning
			s.DriverInfo.WebUIAddress = "10.0.0.1:4040"
		}) != nil {
			return
		}
	}
	if sc.Outcome == Hang || !sleep(sc.Delay) {
		return
	}
	if sc.Outcome == Succeed {
		if err := o.outputPod(ctx, ref, sc.Outputs); err != nil {
			return
		}
	}
	now := metav1.Now()
	switch ref.Kind {
	case "rayjob":
		_ = o.updateRayJob(ctx, ref, func(s *rayv1.RayJobStatus) {
			s.JobDeploymentStatus, s.EndTime = rayv1.JobDeploymentStatusComplete, &now
			s.JobStatus = rayv1.JobStatusSucceeded
			if sc.Outcome == Fail {
				s.JobDeploymentStatus, s.JobStatus = rayv1.JobDeploymentStatusFailed, rayv1.JobStatusFailed
				s.Reason, s.Message = rayv1.JobFailedReason(orDefault(sc.Reason, "AppFailed")), orDefault(sc.Message, "job failed")
			}
		})
	case "sparkapp":
		_ = o.updateSpark(ctx, ref, func(s *sparkv1beta2.SparkApplicationStatus) {
			s.AppState.State, s.TerminationTime = sparkv1beta2.ApplicationStateCompleted, now
			if sc.Outcome == Fail {
				s.AppState.State, s.AppState.ErrorMessage = sparkv1beta2.ApplicationStateFailed, orDefault(sc.Message, "driver failed")
			}
		})
	case "job":
		_ = o.updateJob(ctx, ref, sc, now)
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// outputPod creates the pod whose termination message carries the step's
// outputs, labelled as the real controllers label it.
func (o *Operator) outputPod(ctx context.Context, ref ObjectRef, message string) error {
	// Names and labels as the real controllers make them: the Job
	// controller (pod <job>-xxxxx, container named by Atelier's template),
	// KubeRay's submitter Job (container ray-job-submitter), the Spark
	// operator (pod <app>-driver, container spark-kubernetes-driver).
	labels := map[string]string{}
	name, container := ref.Name+"-x7k2p", "step"
	switch ref.Kind {
	case "job":
		labels["batch.kubernetes.io/job-name"], labels["job-name"] = ref.Name, ref.Name
	case "rayjob":
		labels["batch.kubernetes.io/job-name"], labels["job-name"] = ref.Name, ref.Name
		container = "ray-job-submitter"
	case "sparkapp":
		labels["sparkoperator.k8s.io/app-name"], labels["spark-role"] = ref.Name, "driver"
		name, container = ref.Name+"-driver", "spark-kubernetes-driver"
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ref.Namespace, Labels: labels},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, SchedulerName: o.schedulerName,
			Containers: []corev1.Container{{Name: container, Image: "busybox"}}},
	}
	created, err := o.kube.CoreV1().Pods(ref.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = o.kube.CoreV1().Pods(ref.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	created.Status.Phase = corev1.PodSucceeded
	created.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: container, Image: "busybox",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: message, StartedAt: now, FinishedAt: now}},
	}}
	_, err = o.kube.CoreV1().Pods(ref.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

func (o *Operator) updateRayJob(ctx context.Context, ref ObjectRef, f func(*rayv1.RayJobStatus)) error {
	return retryConflict(func() error {
		j, err := o.ray.RayV1().RayJobs(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		f(&j.Status)
		_, err = o.ray.RayV1().RayJobs(ref.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{})
		return err
	})
}

func (o *Operator) updateRayCluster(ctx context.Context, ref ObjectRef, f func(*rayv1.RayClusterStatus)) error {
	return retryConflict(func() error {
		c, err := o.ray.RayV1().RayClusters(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		f(&c.Status)
		_, err = o.ray.RayV1().RayClusters(ref.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	})
}

func (o *Operator) updateSpark(ctx context.Context, ref ObjectRef, f func(*sparkv1beta2.SparkApplicationStatus)) error {
	return retryConflict(func() error {
		a, err := o.spark.SparkoperatorV1beta2().SparkApplications(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		f(&a.Status)
		_, err = o.spark.SparkoperatorV1beta2().SparkApplications(ref.Namespace).UpdateStatus(ctx, a, metav1.UpdateOptions{})
		return err
	})
}

// updateJob finishes a Job the way the Job controller does, with the
// conditions the apiserver's status validation requires.
func (o *Operator) updateJob(ctx context.Context, ref ObjectRef, sc Scenario, now metav1.Time) error {
	return retryConflict(func() error {
		j, err := o.kube.BatchV1().Jobs(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		start := metav1.NewTime(now.Add(-time.Second))
		j.Status.StartTime = &start
		if sc.Outcome == Fail {
			j.Status.Failed = 1
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: orDefault(sc.Reason, "BackoffLimitExceeded"), Message: orDefault(sc.Message, "Job has reached the specified backoff limit"), LastTransitionTime: now},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: orDefault(sc.Reason, "BackoffLimitExceeded"), Message: orDefault(sc.Message, "Job has reached the specified backoff limit"), LastTransitionTime: now},
			}
		} else {
			j.Status.Succeeded, j.Status.CompletionTime = 1, &now
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
			}
		}
		_, err = o.kube.BatchV1().Jobs(ref.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{})
		return err
	})
}

func retryConflict(f func() error) error {
	var err error
	for range 10 {
		if err = f(); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}
