package framework

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Kueue's names (sigs.k8s.io/kueue v0.14, API kueue.x-k8s.io/v1beta1).
// Atelier reads Kueue's Workloads through the dynamic client rather than
// importing Kueue's module, which would pull controller-runtime and its
// dependency tree into every binary for two labels and a status.
const (
	// LabelKueueQueueName puts an object in a Kueue LocalQueue.
	LabelKueueQueueName = "kueue.x-k8s.io/queue-name"
	// LabelKueueJobUID is set by Kueue on the Workload it makes for a job:
	// the job's UID.
	LabelKueueJobUID = "kueue.x-k8s.io/job-uid"
)

// KueueWorkloads is the resource of Kueue's Workloads.
var KueueWorkloads = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta1", Resource: "workloads"}

// Suspendable is a Kind whose objects Kueue can admit: created suspended
// and in a LocalQueue, and unsuspended by Kueue once it admits them (and
// suspended again if it evicts them). Job and RayJob implement it; a kind
// that does not (SparkApplication: Kueue has no integration for it) keeps
// Atelier's own admission on a Kueue cluster.
type Suspendable interface {
	// SetSuspend suspends obj (or resumes it) and reports whether the
	// object can be managed that way: a RayJob on a run's shared
	// RayCluster cannot (Kueue admits only RayJobs that bring their own).
	SetSuspend(obj Object, suspend bool) bool
	Suspended(obj Object) bool
}

// QueueInKueue puts obj in the LocalQueue queue, suspended, when its kind
// is Suspendable, and reports whether it did.
func QueueInKueue(k Kind, obj Object, queue string) bool {
	s, ok := k.(Suspendable)
	if !ok || queue == "" || !s.SetSuspend(obj, true) {
		return false
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelKueueQueueName] = queue
	obj.SetLabels(labels)
	return true
}

// KueueWaiting says why Kueue has not admitted the job with uid in ns yet,
// from its Workload's conditions ("Kueue: …"), for the step's waiting
// reason. queue names the LocalQueue, for the message when Kueue has made
// no Workload (yet).
func KueueWaiting(ctx context.Context, dyn dynamic.Interface, ns string, uid types.UID, queue string) (string, error) {
	list, err := dyn.Resource(KueueWorkloads).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelKueueJobUID + "=" + string(uid)})
	if err != nil {
		return "", fmt.Errorf("list Kueue workloads of %s: %w", uid, err)
	}
	if len(list.Items) == 0 {
		return fmt.Sprintf("Kueue: waiting in LocalQueue %s: no Workload yet (Kueue makes one when it sees the job; if this stays, check that Kueue runs and that LocalQueue %s exists in namespace %s)", queue, queue, ns), nil
	}
	// Kueue makes one Workload per job; should there be more, the newest
	// speaks.
	items := list.Items
	slices.SortFunc(items, func(a, b unstructured.Unstructured) int {
		return a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time)
	})
	return DescribeKueueWorkload(&items[len(items)-1]), nil
}

// DescribeKueueWorkload renders a Workload's state as a waiting reason:
// the condition that explains the wait (evicted, preempted, quota not
// reserved, admission checks pending), with Kueue's own message, which
// names the flavor and resource that do not fit.
func DescribeKueueWorkload(w *unstructured.Unstructured) string {
	conds := map[string]kueueCondition{}
	raw, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
	for _, c := range raw {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		kc := kueueCondition{}
		kc.status, _ = m["status"].(string)
		kc.reason, _ = m["reason"].(string)
		kc.message, _ = m["message"].(string)
		if t, _ := m["type"].(string); t != "" {
			conds[t] = kc
		}
	}
	queue, _, _ := unstructured.NestedString(w.Object, "spec", "queueName")
	say := func(what string, c kueueCondition) string {
		parts := []string{"Kueue: " + what}
		if c.reason != "" {
			parts = append(parts, c.reason)
		}
		if c.message != "" {
			parts = append(parts, c.message)
		}
		return strings.Join(parts, ": ")
	}
	switch {
	case conds["Finished"].status == "True":
		return say("workload finished", conds["Finished"])
	case conds["Evicted"].status == "True":
		return say("evicted, waiting to be admitted again", conds["Evicted"])
	case conds["Preempted"].status == "True":
		return say("preempted, waiting to be admitted again", conds["Preempted"])
	case conds["Admitted"].status == "True":
		return say("admitted, starting", conds["Admitted"])
	case conds["QuotaReserved"].status == "True":
		return say("quota reserved, waiting for admission checks", conds["QuotaReserved"])
	case conds["QuotaReserved"].status == "False":
		return say("waiting for quota in LocalQueue "+queue, conds["QuotaReserved"])
	}
	return "Kueue: workload " + w.GetName() + " created in LocalQueue " + queue + ", not yet considered"
}

type kueueCondition struct{ status, reason, message string }
