package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// A cluster whose worker submits to Kueue (--kueue-queue): with GPU
// policies in force, a GPU step skips Atelier's admission, its Job is
// created suspended in the LocalQueue, the step shows Kueue's reason while
// Kueue keeps it waiting, and once Kueue resumes the Job the real Job
// controller, scheduler and kwok run it to success. Kueue's controller is
// played by the test (see internal/stack/kubetest's doc).
func TestKueueAdmitsInsteadOfAtelier(t *testing.T) {
	e := newKubeEnv(t, func(string) kubetest.Exit {
		return kubetest.Exit{After: time.Second, Message: `{"ok": 1}`}
	}, true, stackOptions{kueueQueue: "team-q"})
	ctx := context.Background()
	require.NoError(t, kubetest.InstallKueueCRDs(ctx, e.kc.RESTConfig()))
	dyn := dynamic.NewForConfigOrDie(e.kc.RESTConfig())
	e.setupL4Admission(t, "kueue-l4", 0)

	cl, err := e.client().GetClusterWithResponse(ctx, e.cluster)
	require.NoError(t, err)
	require.Equal(t, 200, cl.StatusCode(), "%s", cl.Body)
	require.NotNil(t, cl.JSON200.Capacity)
	assert.Equal(t, "team-q", val(cl.JSON200.Capacity.KueueQueue), "the cluster says Kueue admits its steps")

	id := e.start("kueue-l4", nil)
	var job *batchv1.Job
	require.Eventually(t, func() bool {
		jobs, err := e.kube.BatchV1().Jobs(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
		if err != nil || len(jobs.Items) != 1 {
			return false
		}
		job = &jobs.Items[0]
		return true
	}, 60*time.Second, 100*time.Millisecond, "no Job created: Atelier's admission must not hold a step Kueue admits")
	assert.True(t, ptr.Deref(job.Spec.Suspend, false), "the Job must be created suspended")
	assert.Equal(t, "team-q", job.Labels[framework.LabelKueueQueueName])

	attemptMessage := func(r gen.Run) string {
		if r.Status == nil || len(r.Status.Steps) != 1 || len(val(r.Status.Steps[0].Attempts)) == 0 {
			return ""
		}
		a := *r.Status.Steps[0].Attempts
		return val(a[len(a)-1].Message)
	}
	r := e.waitRun(id, 60*time.Second, "Kueue's no-workload-yet reason", func(r gen.Run) bool {
		return strings.Contains(attemptMessage(r), "no Workload yet")
	})
	st := r.Status.Steps[0]
	assert.Equal(t, gen.StepStateRUNNING, st.State, "not WAITING_FOR_GPU: Kueue, not Atelier, admits")
	assert.Contains(t, val(st.Message), "GPUs admitted by Kueue (LocalQueue team-q)")

	const why = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor l4, 1 more needed"
	require.NoError(t, kubetest.KueueWorkload(ctx, dyn, e.namespace, "job-"+job.Name, "team-q", job.UID,
		[][4]string{{"QuotaReserved", "False", "Pending", why}}))
	e.waitRun(id, 60*time.Second, "Kueue's reason on the attempt", func(r gen.Run) bool {
		return strings.Contains(attemptMessage(r), why)
	})
	pods, err := e.kube.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
	require.NoError(t, err)
	assert.Empty(t, pods.Items, "a suspended Job has no pods")

	// Kueue admits the workload: it resumes the Job.
	cur, err := e.kube.BatchV1().Jobs(e.namespace).Get(ctx, job.Name, metav1.GetOptions{})
	require.NoError(t, err)
	cur.Spec.Suspend = ptr.To(false)
	_, err = e.kube.BatchV1().Jobs(e.namespace).Update(ctx, cur, metav1.UpdateOptions{})
	require.NoError(t, err)
	r = e.waitTerminal(id, 90*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Contains(t, fmt.Sprint(r.Status.Steps[0].Outputs), "ok")
}
