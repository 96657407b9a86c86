package pipeline

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/schema"
)

func TestMergePodAndDefaults(t *testing.T) {
	p, err := Parse([]byte(`
pod:
  nodeSelector: {pool: gpu}
  tolerations: [{key: gpu, operator: Exists}]
  serviceAccountName: trainer
  volumes: [{name: data, mountPath: /data, persistentVolumeClaim: shared}]
  patch: {spec: {dnsPolicy: Default}}
placement: {cluster: c1}
steps:
  - name: a
    container:
      command: ["true"]
      pod:
        nodeSelector: {zone: z1}
        serviceAccountName: other
        volumes: [{name: data, mountPath: /mine, emptyDir: {}}]
        patch: {spec: {terminationGracePeriodSeconds: 3}}
  - name: b
    container: {command: ["true"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, ValidateOptions{Kubernetes: true}); err != nil {
		t.Fatal(err)
	}
	orig := p.Steps[0].Container
	p.ApplyPodDefaults()
	if p.Steps[0].Container == orig {
		t.Fatal("ApplyPodDefaults modified the spec's container in place")
	}
	a := p.Steps[0].Container.Pod
	if a.NodeSelector["pool"] != "gpu" || a.NodeSelector["zone"] != "z1" || a.ServiceAccountName != "other" || len(a.Tolerations) != 1 {
		t.Fatalf("merged pod %+v", a)
	}
	if len(a.Volumes) != 1 || a.Volumes[0].MountPath != "/mine" {
		t.Fatalf("a step's volume replaces the pipeline's of the same name: %+v", a.Volumes)
	}
	patches, err := a.Patches()
	if err != nil || len(patches) != 2 {
		t.Fatalf("patches %v, %v", patches, err)
	}
	if b := p.Steps[1].Container.Pod; b == nil || b.ServiceAccountName != "trainer" {
		t.Fatalf("a step without its own pod settings gets the pipeline's: %+v", b)
	}
}

func TestValidatePodProblems(t *testing.T) {
	p, err := Parse([]byte(`
pod:
  labels: {"atelier.dev/run": x}
steps:
  - name: a
    placement: {cluster: c1}
    container:
      command: ["true"]
      pod:
        tolerations: [{operator: Equal}, {key: k, operator: Exists, value: v}, {key: k, effect: Sometimes, tolerationSeconds: 5}]
        serviceAccountName: "Not A Name"
        volumes:
          - {name: v1, mountPath: /x}
          - {name: v1, mountPath: /x, emptyDir: {medium: Disk}, configMap: c}
        patch: [1, 2]
  - name: local
    container: {command: ["true"], pod: {labels: {team: x}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(p, ValidateOptions{Kubernetes: true})
	var ve *schema.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v", err)
	}
	got := map[string]bool{}
	for _, pr := range ve.Problems {
		got[pr.Path] = true
	}
	c := "steps[0].container.pod."
	for _, want := range []string{`pod.labels["atelier.dev/run"]`, c + "tolerations[0].key", c + "tolerations[1].value", c + "tolerations[2].effect",
		c + "tolerations[2].tolerationSeconds", c + "serviceAccountName", c + "volumes[0]", c + "volumes[1].name", c + "volumes[1].mountPath",
		c + "volumes[1]", c + "volumes[1].emptyDir.medium", c + "patch", "steps[1].container.pod"} {
		if !got[want] {
			b, _ := json.MarshalIndent(ve.Problems, "", " ")
			t.Errorf("no problem at %s; got %s", want, b)
		}
	}
	if got[`steps[1].spark.sparkConf["spark.sql.shuffle.partitions"]`] {
		t.Error("an ordinary Spark setting is refused")
	}
}

// An operator's pod defaults are read as strictly as a spec's pod: every
// problem at its path, and no patch (a default cannot override).
func TestParsePodDefaults(t *testing.T) {
	p, err := ParsePodDefaults([]byte(`
tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
nodeSelector: {pool: gpu}
priorityClassName: batch
labels: {cost-center: ml}
`))
	if err != nil || len(p.Tolerations) != 1 || p.NodeSelector["pool"] != "gpu" || p.PriorityClassName != "batch" || p.Labels["cost-center"] != "ml" {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err := ParsePodDefaults([]byte("  \n")); p != nil || err != nil {
		t.Fatalf("empty: %+v %v", p, err)
	}
	_, err = ParsePodDefaults([]byte(`
tolerations: [{key: a, operator: Sometimes}]
nodeSelectr: {pool: gpu}
patch: {spec: {hostNetwork: true}}
`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"pod defaults", "nodeSelectr"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want %q", err, want)
		}
	}
	_, err = ParsePodDefaults([]byte(`{"tolerations": [{"key": "a", "operator": "Sometimes"}], "patch": {"spec": {}}}`))
	var ve *schema.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%v", err)
	}
	got := map[string]bool{}
	for _, p := range ve.Problems {
		got[p.Path] = true
	}
	if !got["pod.tolerations[0].operator"] || !got["pod.patch"] {
		t.Fatalf("problems %+v", ve.Problems)
	}
}

// Ray and spark steps and shared Ray clusters take pod settings at every
// level (cluster-wide, head, group; step, role), checked with their paths;
// the pipeline's settings are their default; a step on a shared cluster
// may set only the submitter's (pod), not the head's.
func TestRayAndSparkPodSettings(t *testing.T) {
	p, err := Parse([]byte(`
pod: {serviceAccountName: ml, nodeSelector: {zone: z1}}
rayClusters:
  - name: pool
    image: rayproject/ray:2.46.0
    pod: {labels: {shared: "yes"}}
    workers: [{name: w, replicas: 1, pod: {tolerations: [{key: gpu, operator: Exists}]}}]
steps:
  - name: train
    kind: ray
    ray:
      entrypoint: python train.py
      image: rayproject/ray:2.46.0
      pod: {serviceAccountName: trainer}
      headPod: {nodeSelector: {pool: cpu}}
      workers: [{name: gpu, replicas: 2, gpu: 1, pod: {tolerations: [{key: nvidia.com/gpu, operator: Exists}]}}]
  - name: etl
    kind: spark
    spark:
      type: Python
      image: spark:3.5.5
      mainApplicationFile: local:///app/etl.py
      executor: {instances: 2, pod: {priorityClassName: batch}}
  - name: on-pool
    kind: ray
    ray: {entrypoint: python x.py, cluster: pool, pod: {imagePullSecrets: [registry]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, kubeOpts); err != nil {
		t.Fatal(err)
	}
	p.ApplyPodDefaults()
	r := p.Steps[0].Ray
	if r.Pod.ServiceAccountName != "trainer" || r.Pod.NodeSelector["zone"] != "z1" || r.HeadPod.NodeSelector["pool"] != "cpu" {
		t.Errorf("ray pod %+v head %+v", r.Pod, r.HeadPod)
	}
	if sp := p.Steps[1].Spark; sp.Pod.ServiceAccountName != "ml" || sp.Executor.Pod.PriorityClassName != "batch" {
		t.Errorf("spark pod %+v", sp.Pod)
	}
	if c := p.RayClusters[0]; c.Pod.ServiceAccountName != "ml" || c.Pod.Labels["shared"] != "yes" {
		t.Errorf("shared cluster pod %+v", c.Pod)
	}
	if sub := p.Steps[2].Ray.Pod; sub.ServiceAccountName != "ml" || len(sub.ImagePullSecrets) != 1 {
		t.Errorf("submitter pod %+v", sub)
	}

	// The pipeline's patch names the container steps' container: not for
	// Ray's or Spark's pods.
	withPatch, err := Parse([]byte(`
pod: {serviceAccountName: ml, patch: {spec: {containers: [{name: step, tty: true}]}}}
steps:
  - name: train
    kind: ray
    ray: {entrypoint: python train.py, image: rayproject/ray:2.46.0}
`))
	if err != nil {
		t.Fatal(err)
	}
	withPatch.ApplyPodDefaults()
	if rp := withPatch.Steps[0].Ray.Pod; rp.ServiceAccountName != "ml" || len(rp.Patch) != 0 {
		t.Errorf("ray pod %+v: the pipeline's fields without its patch", rp)
	}

	bad, err := Parse([]byte(`
rayClusters:
  - name: pool
    image: rayproject/ray:2.46.0
    headPod: {tolerations: [{operator: Sometimes}]}
steps:
  - name: train
    kind: ray
    ray:
      entrypoint: python train.py
      image: rayproject/ray:2.46.0
      pod: {serviceAccountName: "Not A Name"}
      workers: [{name: gpu, replicas: 1, pod: {labels: {team: "{{ params.team }}"}}}]
  - name: etl
    kind: spark
    spark:
      type: Python
      image: spark:3.5.5
      mainApplicationFile: local:///app/etl.py
      pod: {volumes: [{name: v, mountPath: relative, emptyDir: {}}]}
      driver: {pod: {patch: [1]}}
      sparkConf:
        spark.kubernetes.namespace: another-project
        spark.kubernetes.driver.volumes.hostPath.root.mount.path: /host
        spark.sql.shuffle.partitions: "64"
  - name: on-pool
    kind: ray
    ray: {entrypoint: python x.py, cluster: pool, headPod: {nodeSelector: {a: b}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(bad, kubeOpts)
	var ve *schema.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v", err)
	}
	got := map[string]bool{}
	for _, pr := range ve.Problems {
		got[pr.Path] = true
	}
	for _, want := range []string{"rayClusters[0].headPod.tolerations[0].operator", "steps[0].ray.pod.serviceAccountName",
		"steps[0].ray.workers[0].pod", "steps[1].spark.pod.volumes[0].mountPath", "steps[1].spark.driver.pod.patch", "steps[2].ray.headPod",
		`steps[1].spark.sparkConf["spark.kubernetes.namespace"]`, `steps[1].spark.sparkConf["spark.kubernetes.driver.volumes.hostPath.root.mount.path"]`} {
		if !got[want] {
			b, _ := json.MarshalIndent(ve.Problems, "", " ")
			t.Errorf("no problem at %s; got %s", want, b)
		}
	}
	if got[`steps[1].spark.sparkConf["spark.sql.shuffle.partitions"]`] {
		t.Error("an ordinary Spark setting is refused")
	}
}
