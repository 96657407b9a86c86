package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// Pod settings on the real control plane: a node pool that is tainted and
// labelled takes a step only with the matching toleration and node
// selector (the real scheduler decides, and says why it refuses), the Job's
// pod carries the volumes, labels and patch the spec asked for (checked
// by the real API server), and the cluster's policy refuses a service
// account it does not allow and a host path slipped in through a patch.
func TestPodSettingsOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane")
	}
	e := newKubeEnv(t, func(string) kubetest.Exit { return kubetest.Exit{After: 3 * time.Second, Message: `{"ok": true}`} }, true)
	ctx := context.Background()
	pool := fmt.Sprintf("pool-%d", os.Getpid()%100000)
	require.NoError(t, kubetest.CreateNodes(ctx, e.kube, []*corev1.Node{
		kubetest.MakeNode(pool+"-1").Label("pool", pool).Taint("dedicated", pool, corev1.TaintEffectNoSchedule).Ready(true).Obj(),
	}))

	step := func(pod string) string {
		return fmt.Sprintf(`
steps:
  - name: train
    placement: {cluster: %s}
    container:
      image: busybox
      command: ["true"]
      pod:
%s
`, e.cluster, pod)
	}
	// Without the toleration the scheduler refuses the pool's node.
	e.createPipeline("untolerated", step(fmt.Sprintf(`        nodeSelector: {pool: %s}`, pool)))
	id := e.start("untolerated", nil)
	var msg string
	e.waitRun(id, 60*time.Second, "the scheduler's reason", func(r gen.Run) bool {
		if r.Status == nil || len(r.Status.Steps) == 0 || len(val(r.Status.Steps[0].Attempts)) == 0 {
			return false
		}
		msg = val((*r.Status.Steps[0].Attempts)[0].Message)
		return strings.Contains(msg, "Unschedulable")
	})
	assert.Contains(t, msg, "untolerated taint")
	e.cancel(id, "no toleration")
	e.waitTerminal(id, 30*time.Second)

	// With it the step runs there, and its pod has what was asked.
	e.createPipeline("tolerated", step(fmt.Sprintf(`        nodeSelector: {pool: %[1]s}
        tolerations: [{key: dedicated, value: %[1]s, effect: NoSchedule}]
        labels: {team: vision}
        volumes:
          - {name: scratch, mountPath: /scratch, emptyDir: {sizeLimit: 1Gi}}
          - {name: settings, mountPath: /etc/settings, readOnly: true, configMap: trainer-settings}
        patch: {spec: {terminationGracePeriodSeconds: 7}}`, pool)))
	id = e.start("tolerated", nil)
	var pod corev1.Pod
	e.waitRun(id, 60*time.Second, "the step's pod on the pool's node", func(r gen.Run) bool {
		pods, err := e.kube.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
		require.NoError(t, err)
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				pod = p
				return true
			}
		}
		return false
	})
	assert.Equal(t, pool+"-1", pod.Spec.NodeName)
	assert.Equal(t, "vision", pod.Labels["team"])
	assert.Equal(t, int64(7), *pod.Spec.TerminationGracePeriodSeconds)
	var mounts []string
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounts = append(mounts, m.Name+":"+m.MountPath)
	}
	assert.Subset(t, mounts, []string{"scratch:/scratch", "settings:/etc/settings"})
	r := e.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))

	// Policy: a service account the cluster does not allow, and a host path
	// slipped in through a patch, fail the step for good, saying why.
	for name, pod := range map[string]string{
		"bad-sa":    `        serviceAccountName: cluster-admin`,
		"host-path": `        patch: {spec: {volumes: [{name: root, hostPath: {path: /}}]}}`,
	} {
		e.createPipeline(name, step(pod))
		r := e.waitTerminal(e.start(name, nil), 60*time.Second)
		require.Equal(t, gen.RunStateFAILED, r.State, name)
		errText := val(stepByName(r, "train").Error)
		assert.Contains(t, errText, "breaks the cluster's policy", name)
	}

	// Validation: pod settings on a local step, bad tolerations and
	// volumes are 422s naming each field.
	code, problems := e.push("bad-pod", `
steps:
  - name: local
    container:
      command: ["true"]
      pod:
        tolerations: [{key: a, operator: Sometimes}]
        volumes: [{name: Bad_Name, mountPath: relative}]
`)
	require.Equal(t, 422, code)
	for _, p := range []string{"steps[0].container.pod", "steps[0].container.pod.tolerations[0].operator",
		"steps[0].container.pod.volumes[0].name", "steps[0].container.pod.volumes[0].mountPath", "steps[0].container.pod.volumes[0]"} {
		assert.Contains(t, problems, p)
	}
}

// Cluster pod defaults on the real control plane: the operator's
// --pod-defaults file gives every step pod a toleration and node selector
// for a tainted pool and a label, so a step that says nothing about pods
// runs there; a step's own label wins over the default one.
func TestClusterPodDefaultsOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane")
	}
	pool := fmt.Sprintf("defpool-%d", os.Getpid()%100000)
	defaults := fmt.Sprintf(`
nodeSelector: {pool: %[1]s}
tolerations: [{key: dedicated, value: %[1]s, effect: NoSchedule}]
labels: {team: platform, cost-center: ml}
`, pool)
	e := newKubeEnv(t, func(string) kubetest.Exit { return kubetest.Exit{After: time.Second, Message: `{"ok": true}`} }, true, stackOptions{podDefaults: defaults})
	ctx := context.Background()
	require.NoError(t, kubetest.CreateNodes(ctx, e.kube, []*corev1.Node{
		kubetest.MakeNode(pool+"-1").Label("pool", pool).Taint("dedicated", pool, corev1.TaintEffectNoSchedule).Ready(true).Obj(),
	}))
	e.createPipeline("plain", fmt.Sprintf(`
steps:
  - name: train
    placement: {cluster: %[1]s}
    container: {image: busybox, command: ["true"]}
  - name: own
    placement: {cluster: %[1]s}
    container:
      image: busybox
      command: ["true"]
      pod: {labels: {team: vision}}
`, e.cluster))
	id := e.start("plain", nil)
	pods := map[string]corev1.Pod{}
	e.waitRun(id, 90*time.Second, "both steps' pods scheduled", func(r gen.Run) bool {
		list, err := e.kube.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
		require.NoError(t, err)
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				pods[p.Labels["atelier.dev/step"]] = p
			}
		}
		return len(pods) == 2
	})
	for step, team := range map[string]string{"train": "platform", "own": "vision"} {
		p := pods[step]
		assert.Equal(t, pool+"-1", p.Spec.NodeName, "%s: the default toleration and node selector put it on the pool", step)
		assert.Equal(t, team, p.Labels["team"], "%s: a step's own label wins", step)
		assert.Equal(t, "ml", p.Labels["cost-center"], step)
	}
	r := e.waitTerminal(id, 90*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
}

// Pod settings of ray and spark steps on the real control plane: the real
// KubeRay operator makes the head and worker pods of a step's own cluster
// and of a shared one from templates that carry the settings (a head and
// a worker group sent to a tainted pool by their own settings, the
// pipeline's label on every pod), the SparkApplication's driver and
// executor templates carry theirs (checked by the API server against the
// CRD), and the cluster's policy refuses a head's service account, naming
// the head.
func TestRayAndSparkPodSettingsOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane")
	}
	e := newKubeEnv(t, func(string) kubetest.Exit { return kubetest.Exit{Never: true} }, true)
	ctx := context.Background()
	pool := fmt.Sprintf("raypool-%d", os.Getpid()%100000)
	require.NoError(t, kubetest.CreateNodes(ctx, e.kube, []*corev1.Node{
		kubetest.MakeNode(pool+"-1").Label("pool", pool).Taint("dedicated", pool, corev1.TaintEffectNoSchedule).Ready(true).Obj(),
	}))
	onPool := fmt.Sprintf(`{nodeSelector: {pool: %[1]s}, tolerations: [{key: dedicated, value: %[1]s, effect: NoSchedule}]}`, pool)
	e.createPipeline("ray-spark-pods", fmt.Sprintf(`
pod: {labels: {team: vision}}
rayClusters:
  - name: shared
    image: rayproject/ray:2.9.0
    workers: [{name: pooled, replicas: 1, pod: %[1]s}]
steps:
  - name: train
    kind: ray
    ray:
      entrypoint: python train.py
      image: rayproject/ray:2.9.0
      headPod: %[1]s
      workers:
        - {name: pooled, replicas: 1, pod: %[1]s}
        - {name: anywhere, replicas: 1}
  - name: eval
    kind: ray
    ray: {entrypoint: python eval.py, cluster: shared}
  - name: etl
    kind: spark
    spark:
      type: Python
      image: spark:3.5.0
      mainApplicationFile: local:///opt/etl.py
      executor: {instances: 1, pod: %[1]s}
`, onPool))
	id := e.start("ray-spark-pods", nil)
	type where struct{ node, team string }
	pods := map[string]where{}
	e.waitRun(id, 90*time.Second, "the Ray pods scheduled", func(gen.Run) bool {
		list, err := e.kube.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id + ",ray.io/node-type"})
		require.NoError(t, err)
		for _, p := range list.Items {
			if p.Spec.NodeName == "" {
				continue
			}
			owner := p.Labels["atelier.dev/step"]
			if owner == "" {
				owner = "shared"
			}
			pods[owner+"/"+p.Labels["ray.io/node-type"]+"/"+p.Labels["ray.io/group"]] = where{p.Spec.NodeName, p.Labels["team"]}
		}
		return len(pods) >= 5
	})
	for k, w := range pods {
		assert.Equal(t, "vision", w.team, "%s: the pipeline's label", k)
		switch {
		case strings.HasPrefix(k, "train/head/"), k == "train/worker/pooled", k == "shared/worker/pooled":
			assert.Equal(t, pool+"-1", w.node, "%s: its own settings put it on the pool", k)
		default:
			assert.NotEqual(t, pool+"-1", w.node, "%s: no toleration, not on the pool", k)
		}
	}
	assert.Contains(t, pods, "train/worker/anywhere")
	apps, err := e.spark.SparkoperatorV1beta2().SparkApplications(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
	require.NoError(t, err)
	require.Len(t, apps.Items, 1)
	app := apps.Items[0].Spec
	require.NotNil(t, app.Executor.Template, "the executor's pod template")
	assert.Equal(t, pool, app.Executor.Template.Spec.NodeSelector["pool"])
	assert.Len(t, app.Executor.Template.Spec.Tolerations, 1)
	require.NotNil(t, app.Driver.Template, "the driver's pod template (the pipeline's label)")
	assert.Equal(t, "vision", app.Driver.Template.Labels["team"])
	assert.Empty(t, app.Driver.Template.Spec.Tolerations)
	e.cancel(id, "seen")
	e.waitTerminal(id, 60*time.Second)

	e.createPipeline("ray-bad-sa", `
steps:
  - name: train
    kind: ray
    ray:
      entrypoint: python train.py
      image: rayproject/ray:2.9.0
      headPod: {serviceAccountName: cluster-admin}
`)
	r := e.waitTerminal(e.start("ray-bad-sa", nil), 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	assert.Contains(t, val(stepByName(r, "train").Error), "the head pods break the cluster's policy")
}
