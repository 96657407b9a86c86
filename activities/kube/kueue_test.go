package kube

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// On a cluster whose worker submits to Kueue, a Job step is created
// suspended in the LocalQueue; while Kueue keeps it waiting the step says
// why, in Kueue's words (read from the job's Workload); once Kueue
// resumes it, it runs and succeeds like any Job. The test plays Kueue.
func TestJobWaitsForKueue(t *testing.T) {
	k := startCluster(t)
	must(t, kubetest.InstallKueueCRDs(ctxT(t), k.c.RESTConfig()))
	var mu sync.Mutex
	var reported []string
	b := k.backend(WithKueue("team-a"), WithProgressReporter(func(_ context.Context, p activities.StepProgress) error {
		mu.Lock()
		reported = append(reported, p.Message)
		mu.Unlock()
		return nil
	}))
	b.kueuePoll = 100 * time.Millisecond
	b.clients.Dynamic = k.dyn
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(reported) == 0 {
			return ""
		}
		return reported[len(reported)-1]
	}

	req := jobRequest("fit")
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	out := newRunner(t, b, nil).runStep(req)
	j := k.waitJob(name)
	if !ptr.Deref(j.Spec.Suspend, false) || j.Labels[framework.LabelKueueQueueName] != "team-a" {
		t.Fatalf("job not queued in Kueue: suspend=%v labels=%v", j.Spec.Suspend, j.Labels)
	}
	eventually(t, "no-Workload-yet reason", func() bool { return strings.Contains(last(), "no Workload yet") })

	const why = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 1 more needed"
	must(t, kubetest.KueueWorkload(ctxT(t), k.dyn, k.ns, "job-"+name, "team-a", j.UID,
		[][4]string{{"QuotaReserved", "False", "Pending", why}}))
	eventually(t, "Kueue's reason", func() bool { return strings.Contains(last(), why) })
	if got := last(); got != "Kueue: waiting for quota in LocalQueue team-a: Pending: "+why {
		t.Fatalf("waiting reason %q", got)
	}
	notYet(t, out, 200*time.Millisecond, "suspended in Kueue")

	// Kueue admits: it resumes the Job; the Job controller's pod runs.
	j = k.waitJob(name)
	j.Spec.Suspend = ptr.To(false)
	_, err := k.clients.Kube.BatchV1().Jobs(k.ns).Update(ctxT(t), j, metav1.UpdateOptions{})
	must(t, err)
	pod := k.jobPod(j)
	k.setPodStatus(pod, terminated(0, `{"ok": true}`))
	end := metav1.NewTime(time.Now().Truncate(time.Second))
	k.setJobStatus(name, func(s *batchv1.JobStatus) {
		s.StartTime, s.Succeeded, s.CompletionTime = &end, 1, &end
		s.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: end},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: end},
		}
	})
	o := wait(t, out)
	if o.err != nil || o.res.Outputs["ok"] != true {
		t.Fatalf("after admission: %+v, %v", o.res, o.err)
	}
}

// Without WithKueue nothing is suspended or labelled for Kueue.
func TestNoKueueByDefault(t *testing.T) {
	k := startCluster(t)
	b := k.backend()
	req := jobRequest("plain")
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	newRunner(t, b, nil).runStep(req)
	j := k.waitJob(name)
	if ptr.Deref(j.Spec.Suspend, false) || j.Labels[framework.LabelKueueQueueName] != "" {
		t.Fatalf("job queued in Kueue without WithKueue: suspend=%v labels=%v", j.Spec.Suspend, j.Labels)
	}
}
