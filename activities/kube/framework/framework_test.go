package framework_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/pipeline"

	batchv1 "k8s.io/api/batch/v1"

	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/activities/kube/jobs/job"
)

func intp(i int) *int { return &i }

func TestObjectNameDeterministicValidAndBounded(t *testing.T) {
	long := strings.Repeat("very-long-step-name-", 5) // 100 chars
	steps := []string{"train", "a", long, "x-", "step-with-trailing-dash-", "a" + strings.Repeat("9", 62), "evaluate-model-on-holdout-set"}
	items := []*int{nil, intp(0), intp(7), intp(999)}
	for _, maxLen := range []int{47, 53, 63} {
		seen := map[string]string{} // distinct attempts, distinct names
		for _, step := range steps {
			for _, item := range items {
				for _, attempt := range []int{1, 2, 21} {
					name := framework.ObjectName("0197a3b2-7c1d-7e4f-8a9b-0c1d2e3f4a5b", step, item, attempt, maxLen)
					if again := framework.ObjectName("0197a3b2-7c1d-7e4f-8a9b-0c1d2e3f4a5b", step, item, attempt, maxLen); again != name {
						t.Fatalf("not deterministic: %q vs %q", name, again)
					}
					if len(name) > maxLen {
						t.Errorf("%q: %d chars > %d", name, len(name), maxLen)
					}
					if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
						t.Errorf("%q is not a DNS-1035 label: %v", name, errs)
					}
					id := fmt.Sprintf("%d/%s/%v/%d", maxLen, step, item, attempt)
					if item != nil {
						id = fmt.Sprintf("%d/%s/%d/%d", maxLen, step, *item, attempt)
					}
					if prev, dup := seen[name]; dup {
						t.Errorf("%q names both %s and %s", name, prev, id)
					}
					seen[name] = id
				}
			}
		}
	}
	// Readable: the step, item and attempt show.
	if got := framework.ObjectName("r", "train", intp(3), 2, 63); !strings.HasPrefix(got, "train-i3-a2-") {
		t.Errorf("name %q does not start with train-i3-a2-", got)
	}
	// The run matters.
	if framework.ObjectName("run-1", "train", nil, 1, 47) == framework.ObjectName("run-2", "train", nil, 1, 47) {
		t.Error("different runs share a name")
	}
	// Truncated names of different long steps still differ.
	a := framework.ObjectName("r", long+"a", nil, 1, 47)
	b := framework.ObjectName("r", long+"b", nil, 1, 47)
	if a == b {
		t.Errorf("long steps collide: %q", a)
	}
}

func TestClusterName(t *testing.T) {
	n := framework.ClusterName("run-1", strings.Repeat("shared-cluster-", 6), 53)
	if len(n) > 53 || len(validation.IsDNS1035Label(n)) > 0 {
		t.Errorf("cluster name %q invalid", n)
	}
	if n != framework.ClusterName("run-1", strings.Repeat("shared-cluster-", 6), 53) {
		t.Error("not deterministic")
	}
	if framework.ClusterName("run-1", "c", 53) == framework.ClusterName("run-2", "c", 53) {
		t.Error("runs share a cluster name")
	}
}

func TestLabelValue(t *testing.T) {
	for _, s := range []string{
		"0197a3b2-7c1d-7e4f-8a9b-0c1d2e3f4a5b",
		"sched:2024-01-01T00:00:00Z",
		strings.Repeat("r", 255),
		"-leading",
		":::",
	} {
		v := framework.LabelValue(s)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q, invalid: %v", s, v, errs)
		}
	}
	if v := framework.LabelValue("plain-run.1_x"); v != "plain-run.1_x" {
		t.Errorf("valid value changed to %q", v)
	}
	if framework.LabelValue("a:b") == framework.LabelValue("a;b") {
		t.Error("distinct invalid values collide")
	}
	id := framework.Identity{Project: "p", Run: "sched:1", Step: "s", Attempt: 1}
	if id.Annotations()[framework.AnnotationRunID] != "sched:1" {
		t.Errorf("annotations %v", id.Annotations())
	}
}

func TestSameIdentity(t *testing.T) {
	base := framework.Identity{Project: "p", Run: "r", Step: "s", Attempt: 1}.Labels()
	for _, tc := range []struct {
		name string
		id   framework.Identity
		want bool
	}{
		{"same", framework.Identity{Project: "p", Run: "r", Step: "s", Attempt: 1}, true},
		{"other attempt", framework.Identity{Project: "p", Run: "r", Step: "s", Attempt: 2}, false},
		{"other run", framework.Identity{Project: "p", Run: "r2", Step: "s", Attempt: 1}, false},
		{"an item of it", framework.Identity{Project: "p", Run: "r", Step: "s", Item: intp(0), Attempt: 1}, false},
		{"other project", framework.Identity{Project: "q", Run: "r", Step: "s", Attempt: 1}, false},
	} {
		if got := framework.SameIdentity(tc.id.Labels(), base); got != tc.want {
			t.Errorf("%s: SameIdentity = %v", tc.name, got)
		}
	}
	if framework.SameIdentity(map[string]string{"app": "x"}, base) {
		t.Error("unlabelled object adoptable")
	}
	extra := framework.MergeLabels(base, map[string]string{"team": "ml"})
	if !framework.SameIdentity(extra, base) {
		t.Error("extra non-identity labels must not prevent adoption")
	}
}

func TestNamespaceTemplate(t *testing.T) {
	if ns, err := framework.Namespace("atelier-{project}", "vision"); err != nil || ns != "atelier-vision" {
		t.Errorf("got %q, %v", ns, err)
	}
	if _, err := framework.Namespace("Atelier_{project}", "vision"); err == nil || !strings.Contains(err.Error(), "template") {
		t.Errorf("invalid namespace accepted: %v", err)
	}
}

func TestParseOutputs(t *testing.T) {
	for _, tc := range []struct {
		msg     string
		want    int // number of keys
		wantErr string
	}{
		{"", 0, ""},
		{"  \n", 0, ""},
		{`{"accuracy": 0.93, "model": "s3://m"}`, 2, ""},
		{`{}`, 0, ""},
		{`[1,2]`, 0, "not an array"},
		{`"text"`, 0, "not a string"},
		{`null`, 0, "not null"},
		{`42`, 0, "not a number"},
		{`{"a":`, 0, "not valid JSON"},
		{`{"a": "` + strings.Repeat("x", 4100), 0, "truncated"},
	} {
		out, err := framework.ParseOutputs(tc.msg)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "ATELIER_OUTPUTS") {
				t.Errorf("%.20q: err = %v, want %q", tc.msg, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(out) != tc.want {
			t.Errorf("%.20q: %v, %v", tc.msg, out, err)
		}
	}
}

func term(name string, code int32, msg string, finished time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Message: msg, FinishedAt: metav1.NewTime(finished)}}}
}

func TestOutputTermination(t *testing.T) {
	t0 := time.Now()
	pod := func(name string, cs ...corev1.ContainerStatus) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}, {Name: "sidecar"}}}}
		p.Status.ContainerStatuses = cs
		return p
	}
	// A failed submitter try, then a successful one: the success wins.
	got, ok, _ := framework.OutputTermination([]corev1.Pod{
		pod("try-2", term("main", 0, `{"a":1}`, t0)),
		pod("try-1", term("main", 1, "", t0.Add(time.Minute))),
	}, "main")
	if !ok || got.Pod != "try-2" || got.Message != `{"a":1}` {
		t.Errorf("got %+v %v", got, ok)
	}
	// "" means the first container.
	got, ok, _ = framework.OutputTermination([]corev1.Pod{pod("p", term("sidecar", 0, "no", t0), term("main", 3, "x", t0))}, "")
	if !ok || got.ExitCode != 3 {
		t.Errorf("first container: %+v", got)
	}
	// Running container: pending.
	running := pod("p", corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	if _, ok, pending := framework.OutputTermination([]corev1.Pod{running}, "main"); ok || !pending {
		t.Errorf("running: ok=%v pending=%v", ok, pending)
	}
	if _, ok, pending := framework.OutputTermination(nil, "main"); ok || pending {
		t.Error("no pods")
	}
}

func TestPodTrouble(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: "step", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "details"}}}}}}
	}
	for _, r := range []string{"ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "InvalidImageName", "ErrImageNeverPull"} {
		tr := framework.PodTrouble([]*corev1.Pod{waiting(r)})
		if tr == nil || tr.Reason != r || !strings.Contains(tr.Message, "details") {
			t.Errorf("%s: %+v", r, tr)
		}
		if permanent := r == "ErrImageNeverPull" || r == "InvalidImageName"; tr != nil && tr.Permanent != permanent {
			t.Errorf("%s: Permanent = %v", r, tr.Permanent)
		}
	}
	if tr := framework.PodTrouble([]*corev1.Pod{waiting("ContainerCreating")}); tr != nil {
		t.Errorf("ContainerCreating is normal: %+v", tr)
	}
	deleting := waiting("ErrImagePull")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if tr := framework.PodTrouble([]*corev1.Pod{deleting}); tr != nil {
		t.Errorf("pod being deleted: %+v", tr)
	}
}

func TestRequirements(t *testing.T) {
	res, sel, err := framework.Requirements(&pipeline.Resources{CPU: "2", Memory: "4Gi", GPU: 1, GPUType: "NVIDIA-A100"}, "container.resources")
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests.Cpu().String() != "2" || res.Limits.Cpu().String() != "2" || res.Limits.Memory().String() != "4Gi" ||
		res.Requests.Memory().String() != "4Gi" {
		t.Errorf("cpu/memory: %+v", res)
	}
	if q := res.Limits[framework.GPUResource]; q.String() != "1" {
		t.Errorf("gpu limit %v", q)
	}
	if _, ok := res.Requests[framework.GPUResource]; ok {
		t.Error("gpu request set; the limit implies it")
	}
	if sel[framework.GPUProductKey] != "NVIDIA-A100" {
		t.Errorf("node selector %v", sel)
	}
	for _, bad := range []pipeline.Resources{{CPU: "lots"}, {Memory: "-1Gi"}, {GPU: -1}} {
		if _, _, err := framework.Requirements(&bad, "container.resources"); err == nil || !strings.Contains(err.Error(), "container.resources.") {
			t.Errorf("%+v: err = %v", bad, err)
		}
	}
}

func TestContainerEnvRuntimeWins(t *testing.T) {
	req := activities.KubeStepRequest{Project: "p", RunID: "r", Step: "s", Attempt: 2, Item: intp(4)}
	env := framework.ContainerEnv(map[string]string{"B": "2", "A": "1", "ATELIER_OUTPUTS": "/tmp/mine", "ATELIER_STEP": "spoof"}, framework.StepEnv(req))
	got := map[string]string{}
	var names []string
	for _, e := range env {
		if _, dup := got[e.Name]; dup {
			t.Errorf("%s appears twice", e.Name)
		}
		got[e.Name] = e.Value
		names = append(names, e.Name)
	}
	want := map[string]string{"A": "1", "B": "2", "ATELIER_OUTPUTS": "/dev/termination-log", "ATELIER_STEP": "s",
		"ATELIER_RUN_ID": "r", "ATELIER_PROJECT": "p", "ATELIER_ATTEMPT": "2", "ATELIER_ITEM": "4"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (env %v)", k, got[k], v, names)
		}
	}
}

func TestAPIErrorClassification(t *testing.T) {
	gk := schema.GroupKind{Group: "ray.io", Kind: "RayJob"}
	invalid := apierrors.NewInvalid(gk, "x", field.ErrorList{field.Invalid(field.NewPath("spec", "managedBy"), "me", "must be kuberay")})
	for _, tc := range []struct {
		name      string
		err       error
		invalid   bool
		wantInMsg string
	}{
		{"422", invalid, true, "spec.managedBy"},
		{"400", apierrors.NewBadRequest("bad body"), true, "bad body"},
		{"403 admission", apierrors.NewForbidden(schema.GroupResource{Resource: "jobs"}, "x", errors.New("denied by policy")), true, "denied by policy"},
		{"500", apierrors.NewInternalError(errors.New("etcd down")), false, ""},
		{"429", apierrors.NewTooManyRequests("slow down", 1), false, ""},
		{"timeout", apierrors.NewServerTimeout(schema.GroupResource{Resource: "jobs"}, "create", 1), false, ""},
		{"network", errors.New("connection refused"), false, ""},
	} {
		err := framework.APIError(tc.err)
		var app *temporal.ApplicationError
		isApp := errors.As(err, &app)
		if tc.invalid {
			if !isApp || app.Type() != activities.ErrTypeInvalidStep || !app.NonRetryable() || !strings.Contains(app.Message(), tc.wantInMsg) {
				t.Errorf("%s: got %v", tc.name, err)
			}
			if strings.Contains(app.Message(), "StatusError") {
				t.Errorf("%s: message has client framing: %q", tc.name, app.Message())
			}
		} else if isApp {
			t.Errorf("%s: must stay a plain retryable error, got %v", tc.name, err)
		}
	}
}

func testJob(id framework.Identity) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-a1-0123456789", Labels: id.Labels()}}
}

func TestCreateOrAdopt(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	k := job.New(kube)
	id := framework.Identity{Project: "p", Run: "r", Step: "train", Attempt: 1}

	created, adopted, err := framework.CreateOrAdopt(ctx, k, testJob(id))
	if err != nil || adopted {
		t.Fatalf("create: adopted=%v err=%v", adopted, err)
	}
	// The retried activity (same attempt) adopts the same object.
	again, adopted, err := framework.CreateOrAdopt(ctx, k, testJob(id))
	if err != nil || !adopted || again.GetName() != created.GetName() {
		t.Fatalf("adopt: adopted=%v err=%v", adopted, err)
	}
	list, _ := kube.BatchV1().Jobs("ns").List(ctx, metav1.ListOptions{})
	if len(list.Items) != 1 {
		t.Fatalf("%d jobs after a retry, want 1", len(list.Items))
	}
	// Another attempt, or something not Atelier's, with that name: refused.
	for _, foreign := range []map[string]string{
		framework.Identity{Project: "p", Run: "r", Step: "train", Attempt: 2}.Labels(),
		{"app": "someone-else"},
	} {
		other := testJob(id)
		other.Name = "taken"
		other.Labels = foreign
		if _, err := kube.BatchV1().Jobs("ns").Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		mine := testJob(id)
		mine.Name = "taken"
		_, _, err := framework.CreateOrAdopt(ctx, k, mine)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !app.NonRetryable() ||
			!strings.Contains(app.Message(), "already exists") {
			t.Errorf("foreign %v: err = %v", foreign, err)
		}
		if err := kube.BatchV1().Jobs("ns").Delete(ctx, "taken", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTerminationDescribe(t *testing.T) {
	for _, tc := range []struct {
		term framework.Termination
		want string
	}{
		{framework.Termination{Container: "step", ExitCode: 3, Reason: "Error", Message: `{"partial": 1}`}, "container step exited with code 3"},
		{framework.Termination{Container: "step", ExitCode: 137, Reason: "OOMKilled", Message: `{"epoch": 3}`}, "container step exited with code 137 (OOMKilled)"},
		{framework.Termination{Container: "step", ExitCode: 128, Reason: "StartError", Message: "exec: \"x\": executable file not found in $PATH\n"},
			"container step exited with code 128 (StartError: exec: \"x\": executable file not found in $PATH)"},
	} {
		if got := tc.term.Describe(); got != tc.want {
			t.Errorf("Describe() = %q, want %q", got, tc.want)
		}
	}
}
