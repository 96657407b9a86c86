package workflows

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/schema"
)

func containerWork(mod func(*pipeline.Container)) stepWork {
	c := pipeline.Container{
		Image: "busybox:1.36", Command: []string{"sh", "-c"}, Args: []string{"echo hi"},
		Env: map[string]string{"A": "1", "B": "2"}, WorkingDir: "/w",
		Resources: &pipeline.Resources{CPU: "1", Memory: "1Gi", GPU: 1, GPUType: "L4"},
	}
	if mod != nil {
		mod(&c)
	}
	return stepWork{kind: pipeline.KindContainer, container: &c}
}

func keyOf(w stepWork, cfg stepConfig) string {
	if cfg.cache == nil {
		cfg.cache = &pipeline.Cache{}
	}
	k, _ := cacheKey("train", w, cfg, nil, nil)
	return k
}

// TestCacheKeyPinned: the key of a fixed step never changes by accident
// (entries of earlier releases would stop matching, or worse, match
// something else). Change cacheKeyVersion when it must change.
func TestCacheKeyPinned(t *testing.T) {
	got := keyOf(containerWork(nil), stepConfig{cache: &pipeline.Cache{Version: "1"}})
	const want = "85cb32daee9bf0c66daa290e3a6f8629bc78986c94057568b2cec6afbcb1e741"
	if got != want {
		t.Fatalf("key of the fixed step = %s, want %s", got, want)
	}
}

func TestCacheKeyCoversWhatDecidesTheResult(t *testing.T) {
	base := keyOf(containerWork(nil), stepConfig{})
	changes := map[string]stepWork{
		"image":      containerWork(func(c *pipeline.Container) { c.Image = "busybox:1.37" }),
		"command":    containerWork(func(c *pipeline.Container) { c.Command = []string{"bash", "-c"} }),
		"args":       containerWork(func(c *pipeline.Container) { c.Args = []string{"echo bye"} }),
		"env value":  containerWork(func(c *pipeline.Container) { c.Env = map[string]string{"A": "1", "B": "3"} }),
		"env name":   containerWork(func(c *pipeline.Container) { c.Env = map[string]string{"A": "1", "C": "2"} }),
		"workingDir": containerWork(func(c *pipeline.Container) { c.WorkingDir = "/x" }),
		"gpu count":  containerWork(func(c *pipeline.Container) { c.Resources.GPU = 2 }),
		"gpu type":   containerWork(func(c *pipeline.Container) { c.Resources.GPUType = "A100" }),
		"kind":       {kind: pipeline.KindSpark, spark: &pipeline.SparkStep{}},
	}
	for what, w := range changes {
		if keyOf(w, stepConfig{}) == base {
			t.Errorf("changing the %s keeps the key", what)
		}
	}
	if k, _ := cacheKey("other", containerWork(nil), stepConfig{cache: &pipeline.Cache{}}, nil, nil); k == base {
		t.Error("two steps with the same work share a key")
	}
	if keyOf(containerWork(nil), stepConfig{cache: &pipeline.Cache{Version: "2"}}) == base {
		t.Error("changing cache.version keeps the key")
	}
	if keyOf(containerWork(nil), stepConfig{placement: &pipeline.Placement{Cluster: "c"}}) == base {
		t.Error("the local runtime and Kubernetes share keys, though the local runtime ignores the image")
	}
	same := map[string]stepConfig{
		"timeout":   {timeout: time.Hour},
		"retries":   {retries: pipeline.Retries{Limit: 3}},
		"ttl":       {cache: &pipeline.Cache{TTL: schema.Duration(time.Hour)}},
		"preempted": {preempted: 2, firstAttempt: 3},
	}
	for what, cfg := range same {
		if keyOf(containerWork(nil), cfg) != base {
			t.Errorf("changing the %s changes the key", what)
		}
	}
	if keyOf(containerWork(func(c *pipeline.Container) { c.Resources.CPU, c.Resources.Memory = "8", "64Gi" }), stepConfig{}) != base {
		t.Error("CPU and memory requests change the key")
	}
	// A digest decides; the tag beside it does not.
	a := keyOf(containerWork(func(c *pipeline.Container) { c.Image = "reg:5000/busybox:1.36@sha256:abc" }), stepConfig{})
	b := keyOf(containerWork(func(c *pipeline.Container) { c.Image = "reg:5000/busybox:1.37@sha256:abc" }), stepConfig{})
	if a != b {
		t.Error("two tags of the same digest have different keys")
	}
}

func TestCacheKeySharedRayClusterByContent(t *testing.T) {
	w := stepWork{kind: pipeline.KindRay, ray: &pipeline.RayStep{Entrypoint: "python x.py", Cluster: "shared"}}
	cfg := stepConfig{cache: &pipeline.Cache{}}
	small := &pipeline.RayClusterTemplate{Image: "rayproject/ray@sha256:1", Workers: []pipeline.RayWorkerGroup{{Name: "w", Replicas: 2}}}
	big := &pipeline.RayClusterTemplate{Image: "rayproject/ray@sha256:1", Workers: []pipeline.RayWorkerGroup{{Name: "w", Replicas: 4}}}
	k1, warn := cacheKey("eval", w, cfg, small, nil)
	k2, _ := cacheKey("eval", w, cfg, big, nil)
	if k1 == k2 {
		t.Error("a shared cluster with more workers keeps the key")
	}
	if warn != "" {
		t.Errorf("digest-pinned image warned: %s", warn)
	}
}

func TestCacheKeyWarnsAboutTagsOnKubernetes(t *testing.T) {
	cfg := stepConfig{cache: &pipeline.Cache{}}
	if _, w := cacheKey("s", containerWork(nil), cfg, nil, nil); w != "" {
		t.Errorf("the local runtime ignores images, yet warned: %s", w)
	}
	cfg.placement = &pipeline.Placement{Cluster: "c"}
	if _, w := cacheKey("s", containerWork(nil), cfg, nil, nil); !strings.Contains(w, `"busybox:1.36" is named by a tag`) {
		t.Errorf("warning = %q", w)
	}
	spark := stepWork{kind: pipeline.KindSpark, spark: &pipeline.SparkStep{Image: "spark:3.5"}}
	if _, w := cacheKey("s", spark, cfg, nil, nil); w == "" {
		t.Error("spark image tag: no warning")
	}
}

// Ray and spark steps without secrets keep the keys they had before
// secrets existed for them (their entries still match), and are keyed on
// their secrets' names and variables or files, never on values (which the
// workflow never has).
func TestCacheKeyRaySparkSecrets(t *testing.T) {
	cfg := stepConfig{cache: &pipeline.Cache{Version: "1"}, placement: &pipeline.Placement{Cluster: "c"}}
	ray := func(refs ...pipeline.SecretEnv) stepWork {
		return stepWork{kind: pipeline.KindRay, ray: &pipeline.RayStep{Entrypoint: "python t.py", RuntimeEnv: map[string]any{"pip": []any{"torch"}}, Secrets: refs,
			RayClusterTemplate: pipeline.RayClusterTemplate{Image: "rayproject/ray:2.46.0", Workers: []pipeline.RayWorkerGroup{{Name: "w", Replicas: 2, Resources: pipeline.Resources{GPU: 1}}}}}}
	}
	spark := func(refs ...pipeline.SecretEnv) stepWork {
		return stepWork{kind: pipeline.KindSpark, spark: &pipeline.SparkStep{Type: "Python", Image: "spark:3.5.5", MainApplicationFile: "local:///etl.py",
			Executor: pipeline.SparkRole{Cores: 2, Instances: 3}, Secrets: refs}}
	}
	for _, c := range []struct {
		what, step string
		work       func(...pipeline.SecretEnv) stepWork
		want       string
	}{
		{"ray", "train", ray, "e25413185763bee2c125b03a86c02ffc9b02c8b488e62a4a2e2170568b521470"},
		{"spark", "etl", spark, "525894a9ff9432728fa50da7ab2959c99e8e97366763c674903c503b2b3864d6"},
	} {
		base, _ := cacheKey(c.step, c.work(), cfg, nil, nil)
		if base != c.want {
			t.Errorf("%s step without secrets: key %s, want %s (as before ray/spark secrets)", c.what, base, c.want)
		}
		keys := map[string]bool{base: true}
		for _, refs := range [][]pipeline.SecretEnv{
			{{Name: "hf-token", Env: "HF_TOKEN"}},
			{{Name: "hf-token", Env: "TOKEN"}},
			{{Name: "other", Env: "HF_TOKEN"}},
			{{Name: "hf-token", File: "token"}},
		} {
			k, _ := cacheKey(c.step, c.work(refs...), cfg, nil, nil)
			if keys[k] {
				t.Errorf("%s: secrets %+v share a key with another set", c.what, refs)
			}
			keys[k] = true
		}
	}
}

func TestImageKey(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                        "busybox",
		"busybox:1.36":                   "busybox:1.36",
		"busybox@sha256:ab":              "busybox@sha256:ab",
		"busybox:1.36@sha256:ab":         "busybox@sha256:ab",
		"reg:5000/team/img:v1@sha256:ab": "reg:5000/team/img@sha256:ab",
		"reg:5000/team/img@sha256:ab":    "reg:5000/team/img@sha256:ab",
		"":                               "",
	} {
		if got := imageKey(in); got != want {
			t.Errorf("imageKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCacheKeyClassifiesEveryWorkField fails when a step's work gains a
// field that nobody decided to key or to leave out (cacheKeyDoc), so a
// new field can never silently give stale hits.
func TestCacheKeyClassifiesEveryWorkField(t *testing.T) {
	classified := map[string]string{
		"Container.Image": "keyed", "Container.Command": "keyed", "Container.Args": "keyed", "Container.Env": "keyed",
		"Container.WorkingDir": "keyed", "Container.Resources": "keyed (GPU and type)",
		"Container.Secrets":   "keyed by name and variable, never by value",
		"Container.Pod":       "excluded: decides where and as whom it runs, not what it computes",
		"Container.Artifacts": "outputs as declared; inputs by digest (the runtime resolves them)",
		"Resources.CPU":       "excluded: decides placement", "Resources.Memory": "excluded: decides placement",
		"Resources.GPU": "keyed", "Resources.GPUType": "keyed",
		"RayStep.Artifacts":   "outputs as declared; inputs by digest (the runtime resolves them)",
		"SparkStep.Artifacts": "outputs as declared; inputs by digest (the runtime resolves them)",
		"RayStep.Entrypoint":  "keyed", "RayStep.RuntimeEnv": "keyed", "RayStep.Cluster": "keyed by content",
		"RayStep.Secrets":            "keyed by name and variable or file, never by value",
		"SparkStep.Secrets":          "keyed by name and variable or file, never by value",
		"RayClusterTemplate.Pod":     "excluded: decides where and as whom it runs, not what it computes",
		"RayClusterTemplate.HeadPod": "excluded: decides where and as whom it runs",
		"RayWorkerGroup.Pod":         "excluded: decides where and as whom it runs",
		"SparkStep.Pod":              "excluded: decides where and as whom it runs",
		"SparkRole.Pod":              "excluded: decides where and as whom it runs",
		"RayStep.RayClusterTemplate": "keyed", "RayStep.ShutdownAfterJobFinishes": "excluded: lifecycle",
		"RayStep.TTLSecondsAfterFinished": "excluded: lifecycle", "RayStep.ActiveDeadlineSeconds": "excluded: a timeout",
		"RayClusterTemplate.Image": "keyed", "RayClusterTemplate.RayVersion": "keyed",
		"RayClusterTemplate.Head": "keyed (GPU)", "RayClusterTemplate.Workers": "keyed",
		"RayWorkerGroup.Name": "keyed", "RayWorkerGroup.Replicas": "keyed", "RayWorkerGroup.MinReplicas": "keyed",
		"RayWorkerGroup.MaxReplicas": "keyed", "RayWorkerGroup.Resources": "keyed (GPU)",
		"SparkStep.Type": "keyed", "SparkStep.Image": "keyed", "SparkStep.SparkVersion": "keyed",
		"SparkStep.MainClass": "keyed", "SparkStep.MainApplicationFile": "keyed", "SparkStep.Arguments": "keyed",
		"SparkStep.SparkConf": "keyed", "SparkStep.Driver": "keyed", "SparkStep.Executor": "keyed",
		"SparkRole.Cores": "keyed", "SparkRole.Memory": "excluded: decides placement", "SparkRole.Instances": "keyed",
		"SparkRole.GPU": "keyed", "SparkRole.GPUType": "keyed",
	}
	for _, v := range []any{pipeline.Container{}, pipeline.Resources{}, pipeline.RayStep{}, pipeline.RayClusterTemplate{}, pipeline.RayWorkerGroup{}, pipeline.SparkStep{}, pipeline.SparkRole{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name := typ.Name() + "." + typ.Field(i).Name
			if _, ok := classified[name]; !ok {
				t.Errorf("%s is not classified: key it in cacheKeyDoc (workflows/cache.go) or say why not, and update docs/api.md", name)
			}
		}
	}
}

// A ray job's inputs are keyed by content and its outputs as declared, as
// a container's: another dataset is a miss, the same bytes from another
// run a hit. (Without artifacts its key is the one pinned above.)
func TestCacheKeyRayArtifacts(t *testing.T) {
	cfg := stepConfig{cache: &pipeline.Cache{}}
	w := func(outputs ...pipeline.ArtifactOutput) stepWork {
		return stepWork{kind: pipeline.KindRay, ray: &pipeline.RayStep{Entrypoint: "python t.py",
			RayClusterTemplate: pipeline.RayClusterTemplate{Image: "rayproject/ray@sha256:1"},
			Artifacts:          &pipeline.Artifacts{Inputs: []pipeline.ArtifactInput{{Name: "data", From: "prep.data"}}, Outputs: outputs}}}
	}
	in := func(digest, run string) []runstate.Artifact {
		return []runstate.Artifact{{Name: "data", Digest: digest, Producer: runstate.ArtifactProducer{Run: run, Step: "prep", Attempt: 1}}}
	}
	model := pipeline.ArtifactOutput{Name: "model"}
	base, _ := cacheKey("train", w(model), cfg, nil, in("sha256:aa", "r1"))
	if k, _ := cacheKey("train", w(model), cfg, nil, in("sha256:aa", "r2")); k != base {
		t.Error("the same input bytes from another run change the key")
	}
	if k, _ := cacheKey("train", w(model), cfg, nil, in("sha256:bb", "r1")); k == base {
		t.Error("another input digest keeps the key")
	}
	if k, _ := cacheKey("train", w(pipeline.ArtifactOutput{Name: "model", Path: "ckpt"}), cfg, nil, in("sha256:aa", "r1")); k == base {
		t.Error("another output path keeps the key")
	}

	spark := stepWork{kind: pipeline.KindSpark, spark: &pipeline.SparkStep{Type: "Python", Image: "spark@sha256:1", MainApplicationFile: "local:///etl.py",
		Artifacts: &pipeline.Artifacts{Inputs: []pipeline.ArtifactInput{{Name: "data", From: "prep.data"}}}}}
	a, _ := cacheKey("etl", spark, cfg, nil, in("sha256:aa", "r1"))
	if b, _ := cacheKey("etl", spark, cfg, nil, in("sha256:bb", "r1")); a == b {
		t.Error("spark: another input digest keeps the key")
	}
}
