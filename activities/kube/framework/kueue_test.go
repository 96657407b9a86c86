package framework

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func workload(queue string, conds ...[4]string) *unstructured.Unstructured {
	var list []any
	for _, c := range conds {
		list = append(list, map[string]any{"type": c[0], "status": c[1], "reason": c[2], "message": c[3]})
	}
	w := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "job-x"},
		"spec":     map[string]any{"queueName": queue},
		"status":   map[string]any{"conditions": list},
	}}
	return w
}

func TestDescribeKueueWorkload(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    *unstructured.Unstructured
		want string
	}{
		{"not considered", workload("q"), "Kueue: workload job-x created in LocalQueue q, not yet considered"},
		{"no quota", workload("q", [4]string{"QuotaReserved", "False", "Pending", "insufficient unused quota for nvidia.com/gpu in flavor h100, 1 more needed"}),
			"Kueue: waiting for quota in LocalQueue q: Pending: insufficient unused quota for nvidia.com/gpu in flavor h100, 1 more needed"},
		{"checks", workload("q", [4]string{"QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"}, [4]string{"Admitted", "False", "", ""}),
			"Kueue: quota reserved, waiting for admission checks: QuotaReserved: Quota reserved in ClusterQueue cq"},
		{"admitted", workload("q", [4]string{"QuotaReserved", "True", "", ""}, [4]string{"Admitted", "True", "Admitted", "The workload is admitted"}),
			"Kueue: admitted, starting: Admitted: The workload is admitted"},
		{"preempted", workload("q", [4]string{"Admitted", "False", "", ""}, [4]string{"Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue"}),
			"Kueue: evicted, waiting to be admitted again: Preempted: Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DescribeKueueWorkload(tc.w); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
