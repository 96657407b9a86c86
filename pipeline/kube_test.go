package pipeline

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var kubeOpts = ValidateOptions{Kinds: []StepKind{KindContainer, KindRay, KindSpark}}

// okRay and okSpark are minimal valid blocks, for cases about other fields.
const (
	okRay   = `{entrypoint: python x.py, image: ray}`
	okSpark = `{type: Python, image: spark, mainApplicationFile: local:///x.py}`
)

func TestValidateKube(t *testing.T) {
	cases := []struct {
		name string
		spec string
		opts *ValidateOptions // default kubeOpts
		want []want
	}{
		{"minimal ray and spark steps are valid", `
steps:
  - {name: a, kind: ray, ray: ` + okRay + `}
  - {name: b, kind: spark, spark: ` + okSpark + `}`, nil, nil},
		{"one configuration block per kind", `
steps:
  - {name: a, kind: ray, ray: ` + okRay + `, container: {command: [x]}, spark: ` + okSpark + `}
  - {name: b, kind: spark, spark: ` + okSpark + `, ray: ` + okRay + `}
  - {name: c, kind: spark, container: {command: [x]}}
  - {name: d, kind: ray}
  - {name: e, ray: ` + okRay + `, spark: ` + okSpark + `, container: {command: [x]}}`, nil, []want{
			{"steps[0].container", "only container steps may set container (this step's kind is ray)"},
			{"steps[0].spark", "only spark steps may set spark (this step's kind is ray)"},
			{"steps[1].ray", "only ray steps may set ray (this step's kind is spark)"},
			{"steps[2].container", "only container steps may set container (this step's kind is spark)"},
			{"steps[2].spark", "required for a spark step"},
			{"steps[3].ray", "required for a ray step"},
			{"steps[4].ray", "only ray steps may set ray (this step's kind is container)"},
			{"steps[4].spark", "only spark steps may set spark (this step's kind is container)"},
		}},
		{"ray own cluster", `
steps:
  - name: a
    kind: ray
    ray:
      entrypoint: "  "
      image: "ray:{{ params.v }}"
      head: {cpu: lots, memory: 1Gi}
      workers:
        - {name: gpu, replicas: 2, minReplicas: 3, gpu: 1, gpuType: NVIDIA-A100}
        - {name: Big_Group, replicas: -1, minReplicas: -1, maxReplicas: -2}
        - {name: gpu, replicas: 5, maxReplicas: 4}
        - {replicas: 0}
        - {name: ok, replicas: 0, maxReplicas: 0, minReplicas: 0}
        - {name: auto, replicas: 2, minReplicas: 1, maxReplicas: 2}
      ttlSecondsAfterFinished: -1
      activeDeadlineSeconds: -5
  - {name: b, kind: ray, ray: {entrypoint: x}}`, nil, []want{
			{"steps[0].ray.entrypoint", "required: the command Ray runs"},
			{"steps[0].ray.image", "templates are not supported in image"},
			{"steps[0].ray.head.cpu", `invalid quantity "lots": use Kubernetes syntax such as "500m" or "2"`},
			{"steps[0].ray.workers[0].minReplicas", "must not exceed replicas (2), got 3"},
			{"steps[0].ray.workers[1].name", `invalid worker group name "Big_Group"`},
			{"steps[0].ray.workers[1].replicas", "must not be negative, got -1"},
			{"steps[0].ray.workers[1].minReplicas", "must not be negative, got -1"},
			{"steps[0].ray.workers[1].maxReplicas", "must not be negative, got -2"},
			{"steps[0].ray.workers[2].name", `duplicate worker group name "gpu" (also workers[0])`},
			{"steps[0].ray.workers[2].replicas", "must not exceed maxReplicas (4), got 5"},
			{"steps[0].ray.workers[3].name", "required"},
			{"steps[0].ray.ttlSecondsAfterFinished", "must not be negative, got -1"},
			{"steps[0].ray.activeDeadlineSeconds", "must not be negative, got -5"},
			{"steps[1].ray.image", "required: the Ray image of the job's cluster (or set cluster"},
		}},
		{"ray on a shared cluster", `
rayClusters:
  - {name: shared, image: ray}
  - {name: other, image: ray}
steps:
  - name: a
    kind: ray
    ray:
      entrypoint: x
      cluster: shared
      image: ray
      rayVersion: "2.9"
      head: {gpu: 1}
      workers: [{name: w, replicas: 1}]
      shutdownAfterJobFinishes: false
      ttlSecondsAfterFinished: 1
      activeDeadlineSeconds: 1
  - {name: b, kind: ray, ray: {entrypoint: x, cluster: sharde}}
  - {name: c, kind: ray, ray: {entrypoint: x, cluster: gpu-pool}}
  - {name: d, kind: ray, ray: {entrypoint: x, cluster: other}, placement: {cluster: east}}
  - {name: e, kind: ray, ray: {entrypoint: x, cluster: other}}`, nil, []want{
			{"steps[0].ray.image", `must be empty when cluster is set: the shared cluster "shared" defines it`},
			{"steps[0].ray.rayVersion", `the shared cluster "shared" defines it`},
			{"steps[0].ray.head", `the shared cluster "shared" defines it`},
			{"steps[0].ray.workers", `the shared cluster "shared" defines it`},
			{"steps[0].ray.shutdownAfterJobFinishes", "it applies only to a job with its own RayCluster"},
			{"steps[0].ray.ttlSecondsAfterFinished", "it applies only to a job with its own RayCluster"},
			{"steps[0].ray.activeDeadlineSeconds", "it applies only to a job with its own RayCluster"},
			{"steps[1].ray.cluster", `unknown ray cluster "sharde" (did you mean "shared"?)`},
			{"steps[2].ray.cluster", `unknown ray cluster "gpu-pool"; rayClusters has other, shared`},
			{"steps[3].placement", `a ray step on a shared cluster runs where that cluster is; set placement on the rayClusters entry "other" instead`},
		}},
		{"ray cluster without rayClusters", `
steps:
  - {name: a, kind: ray, ray: {entrypoint: x, cluster: pool}}`, nil,
			[]want{{"steps[0].ray.cluster", `unknown ray cluster "pool": the pipeline declares no rayClusters`}}},
		{"rayClusters", `
rayClusters:
  - {name: a-cluster-name-that-is-too-long-x, image: ray}
  - {name: Pool, image: ray}
  - {name: pool, image: ray}
  - {name: pool, image: ray}
  - {image: ray}
  - name: gpus
    head: {memory: 4g}
    workers:
      - {name: w, replicas: 1, gpu: -1}
      - {name: w, replicas: 1}
    placement: {cluster: east, strategy: first}
  - {name: unused, image: "ray:{{ params.x }}"}
steps:
  - {name: a, container: {command: [x]}}`, nil, []want{
			{"rayClusters[0].name", `invalid ray cluster name "a-cluster-name-that-is-too-long-x": use lowercase letters, digits and '-', starting with a letter, at most 31 characters`},
			{"rayClusters[1].name", `invalid ray cluster name "Pool"`},
			{"rayClusters[3].name", `duplicate ray cluster name "pool" (also rayClusters[2])`},
			{"rayClusters[4].name", "required"},
			{"rayClusters[5].image", "required: the Ray image of the shared cluster"},
			{"rayClusters[5].head.memory", `invalid quantity "4g": use Kubernetes syntax such as "512Mi" or "4Gi"`},
			{"rayClusters[5].workers[0].gpu", "must not be negative, got -1"},
			{"rayClusters[5].workers[1].name", `duplicate worker group name "w" (also workers[0])`},
			{"rayClusters[5].placement.strategy", "not allowed together with cluster"},
			{"rayClusters[6].image", "templates are not supported in image"},
		}},
		{"ray templates", `
params:
  - {name: lr, type: number, default: 0.1}
steps:
  - {name: prep, container: {command: [x]}}
  - name: a
    kind: ray
    ray:
      entrypoint: "python t.py --lr {{ params.lrr }} --n {{ item }}"
      image: ray
      runtimeEnv:
        pip: [torch, "{{ steps.prepp.outputs.pkg }}"]
        env_vars: {A: "{{ params.lr }}", B: "{{ 1 + }}", C: 3}
        working_dir: "{{ steps.prep.outputs.dir }}"
        config: {nested: {deep: ["{{ run.user }}"]}, flag: true}
  - name: b
    kind: ray
    forEach: {items: [1, 2]}
    ray: {entrypoint: "python t.py --n {{ item }} --lr {{ params.lr }}", image: ray, runtimeEnv: {env_vars: {"N": "{{ item }}"}}}`, nil, []want{
			{"steps[1].ray.entrypoint", `in {{ params.lrr }}: unknown param "lrr" (did you mean "lr"?)`},
			{"steps[1].ray.entrypoint", "in {{ item }}: item is only available in steps with forEach"},
			{"steps[1].ray.runtimeEnv.config.nested.deep[0]", `unknown run field "user"`},
			{"steps[1].ray.runtimeEnv.env_vars.B", "in {{ 1 + }}: unexpected token EOF"},
			{"steps[1].ray.runtimeEnv.pip[1]", `unknown step "prepp" (did you mean "prep"?)`},
		}},
		{"spark", `
steps:
  - name: a
    kind: spark
    spark:
      type: python
      mainApplicationFile: " "
      mainClass: x.Main
      sparkConf: {"": x}
      driver: {cores: -1, memory: 4Gi, instances: 2, gpu: -1}
      executor: {cores: -2, memory: 1.5g, instances: -3, gpuType: NVIDIA-A100}
  - {name: b, kind: spark, spark: {type: Scala, image: "spark:{{ params.v }}", mainApplicationFile: local:///app.jar}}
  - {name: c, kind: spark, spark: {image: spark, mainApplicationFile: x}}
  - {name: d, kind: spark, spark: {type: Go, image: spark, mainApplicationFile: x}}
  - name: e
    kind: spark
    spark:
      type: Java
      image: spark
      mainClass: com.example.Etl
      mainApplicationFile: local:///app.jar
      driver: {cores: 1, memory: 512m}
      executor: {cores: 2, memory: "4096", instances: 3, gpu: 1, gpuType: NVIDIA-L4}`, nil, []want{
			{"steps[0].spark.type", `unknown type "python"; use one of Python, Scala, Java, R (did you mean "Python"?)`},
			{"steps[0].spark.image", "required: the Spark image"},
			{"steps[0].spark.mainApplicationFile", "required: the application to run"},
			{"steps[0].spark.sparkConf[\"\"]", "empty configuration key"},
			{"steps[0].spark.driver.cores", "must not be negative, got -1"},
			{"steps[0].spark.driver.memory", `invalid Spark memory "4Gi": use JVM notation such as "512m" or "4g"`},
			{"steps[0].spark.driver.instances", "only the executor has instances"},
			{"steps[0].spark.driver.gpu", "must not be negative, got -1"},
			{"steps[0].spark.executor.cores", "must not be negative, got -2"},
			{"steps[0].spark.executor.memory", `invalid Spark memory "1.5g"`},
			{"steps[0].spark.executor.instances", "must not be negative, got -3"},
			{"steps[0].spark.executor.gpuType", "requires gpu > 0"},
			{"steps[1].spark.image", "templates are not supported in image"},
			{"steps[1].spark.mainClass", "required for a Scala application"},
			{"steps[2].spark.type", "required; use one of Python, Scala, Java, R"},
			{"steps[3].spark.type", `unknown type "Go"`},
		}},
		{"ray and spark secrets: the container rules, at their paths", `
rayClusters:
  - {name: shared, image: ray}
steps:
  - name: a
    kind: ray
    ray:
      entrypoint: python t.py
      image: ray
      runtimeEnv: {env_vars: {TAKEN: "1"}}
      secrets:
        - {name: hf-token, env: HF_TOKEN}
        - {name: hf-token, env: HF_TOKEN}
        - {name: "Bad Name", file: creds.json}
        - {name: x1, env: TAKEN}
        - {name: x2, env: ATELIER_SECRETS}
        - {name: x3, file: "../etc/passwd"}
        - {name: x4, env: X, file: x}
        - {name: gcp-sa, file: creds.json}
  - name: b
    kind: spark
    spark:
      type: Python
      image: spark
      mainApplicationFile: local:///x.py
      sparkConf: {spark.kubernetes.driverEnv.DRV: "1", spark.executorEnv.EXE: "1"}
      secrets:
        - {name: db-password, env: DB_PASSWORD}
        - {name: x1, env: DRV}
        - {name: x2, env: EXE}
        - {name: x3}
        - {name: x4, env: "A=B"}
        - {name: gcp-sa, file: creds.json}
  - {name: c, kind: ray, ray: {entrypoint: x, cluster: shared, secrets: [{name: hf-token, env: HF_TOKEN}]}}`, nil, []want{
			{"steps[0].ray.secrets[1].env", "HF_TOKEN is given twice"},
			{"steps[0].ray.secrets[2].name", `"Bad Name" is not a secret name`},
			{"steps[0].ray.secrets[3].env", "TAKEN is also set in runtimeEnv.env_vars"},
			{"steps[0].ray.secrets[4].env", "ATELIER_SECRETS: ATELIER_ variables are set by Atelier"},
			{"steps[0].ray.secrets[5].file", `"../etc/passwd" is not a file name`},
			{"steps[0].ray.secrets[6]", "exactly one of env (a variable) or file"},
			{"steps[0].ray.secrets[7].file", "creds.json is given twice"},
			{"steps[1].spark.secrets[1].env", "DRV is also set in sparkConf (spark.kubernetes.driverEnv.DRV)"},
			{"steps[1].spark.secrets[2].env", "EXE is also set in sparkConf (spark.executorEnv.EXE)"},
			{"steps[1].spark.secrets[3]", "exactly one of env (a variable) or file"},
			{"steps[1].spark.secrets[4].env", `invalid environment variable name "A=B"`},
			{"steps[2].ray.secrets", `must be empty when cluster is set: the pods of the shared cluster "shared" are the run's, not this step's`},
		}},
		{"valid ray and spark secrets", `
steps:
  - {name: a, kind: ray, ray: {entrypoint: x, image: ray, secrets: [{name: hf-token, env: HF_TOKEN}, {name: gcp-sa, file: creds.json}]}}
  - {name: b, kind: spark, spark: {type: Python, image: s, mainApplicationFile: x, secrets: [{name: db-password, env: DB_PASSWORD}, {name: gcp-sa, file: creds.json}]}}`, nil, nil},
		{"python app with a main class", `
steps:
  - {name: a, kind: spark, spark: {type: R, image: s, mainApplicationFile: x, mainClass: Main}}`, nil,
			[]want{{"steps[0].spark.mainClass", "only Scala and Java applications have a main class"}}},
		{"spark templates", `
params:
  - {name: date, type: string}
steps:
  - name: a
    kind: spark
    spark:
      type: Python
      image: spark
      mainApplicationFile: "local:///{{ params.app }}.py"
      arguments: ["--date={{ params.date }}", "{{ item }}"]
      sparkConf: {spark.app.name: "{{ steps.a.outputs.x }}", spark.x: "{{ run.id }}"}`, nil, []want{
			{"steps[0].spark.mainApplicationFile", `unknown param "app"`},
			{"steps[0].spark.arguments[1]", "item is only available in steps with forEach"},
			{"steps[0].spark.sparkConf[\"spark.app.name\"]", "a step cannot use its own outputs (steps.a)"},
		}},
		{"container resources", `
steps:
  - {name: a, container: {command: [x], resources: {cpu: "-1", memory: 512m, gpu: -1, gpuType: "bad type"}}}
  - {name: b, container: {command: [x], resources: {cpu: "1.5", memory: 0.5Gi, gpuType: NVIDIA-A100}}}
  - {name: c, container: {command: [x], resources: {cpu: 250m, memory: 1G, gpu: 2, gpuType: NVIDIA-A100-SXM4-80GB}}}
  - {name: d, container: {command: [x], resources: {memory: "4Gi "}}}`, nil, []want{
			{"steps[0].container.resources.cpu", `must not be negative, got "-1"`},
			{"steps[0].container.resources.memory", `"512m" is not a whole number of bytes (m means thousandths)`},
			{"steps[0].container.resources.gpu", "must not be negative, got -1"},
			{"steps[0].container.resources.gpuType", "requires gpu > 0"},
			{"steps[0].container.resources.gpuType", `invalid GPU type "bad type"`},
			{"steps[1].container.resources.gpuType", "requires gpu > 0"},
			{"steps[3].container.resources.memory", `invalid quantity "4Gi "`},
		}},
		{"placement", `
placement: {cluster: East}
steps:
  - {name: a, placement: {}, container: {command: [x]}}
  - {name: b, placement: {cluster: east, selector: {env: dev}, strategy: fastest}, container: {command: [x]}}
  - {name: c, placement: {selector: {"": x, env: "", zone: a}, strategy: fastest}, container: {command: [x]}}
  - {name: d, placement: {selector: {env: dev}, strategy: most-free-gpus}, container: {command: [x]}}
  - {name: e, placement: {strategy: first}, kind: ray, ray: ` + okRay + `}
  - {name: f, placement: {cluster: c-1}, kind: spark, spark: ` + okSpark + `}`, nil, []want{
			{"placement.cluster", `invalid cluster name "East": use lowercase letters, digits and '-', starting with a letter, at most 63 characters`},
			{"steps[0].placement", "set cluster, selector or strategy, or leave placement out"},
			{"steps[1].placement.selector", "not allowed together with cluster"},
			{"steps[1].placement.strategy", "not allowed together with cluster"},
			{"steps[2].placement.strategy", `unknown strategy "fastest"; use one of most-free-gpus, first`},
			{"steps[2].placement.selector[\"\"]", "empty label key"},
			{"steps[2].placement.selector.env", "must not be empty"},
		}},
		{"no cluster: placement and rayClusters cannot be honoured", `
placement: {selector: {env: dev}}
rayClusters:
  - {name: pool, image: ray}
steps:
  - {name: a, placement: {cluster: east}, container: {command: [x]}}
  - {name: b, kind: ray, placement: {cluster: east}, ray: {entrypoint: x, cluster: pool}}
  - {name: c, container: {command: [x], resources: {gpu: 1}}}`, &localOpts, []want{
			{"placement", "placement needs a Kubernetes cluster; the local runtime runs every step locally"},
			{"rayClusters", "shared Ray clusters need a Kubernetes cluster; the local runtime runs only container steps"},
			{"steps[0].placement", "placement needs a Kubernetes cluster"},
			{"steps[1].kind", `step kind "ray" needs a Kubernetes cluster; the local runtime runs only container steps`},
			{"steps[1].placement", "a ray step on a shared cluster runs where that cluster is"},
		}},
		{"a cluster that runs container steps only", `
placement: {selector: {env: dev}}
steps:
  - {name: a, placement: {cluster: east}, container: {command: [x]}}
  - {name: b, kind: ray, ray: {}}
  - {name: c, kind: inference}`, &ValidateOptions{Kinds: []StepKind{KindContainer}, Kubernetes: true}, []want{
			{"steps[1].kind", `step kind "ray" is not supported by this runtime (it runs container)`},
			{"steps[2].kind", `step kind "inference" is not supported by this runtime (it runs container)`},
		}},
		{"kinds every runtime runs, on a cluster runtime", `
steps:
  - {name: b, kind: approval}
  - {name: c, kind: pipeline, pipeline: {name: other}}`, nil, nil},
		{"a cluster runtime without inference", `
steps:
  - {name: a, kind: inference, inference: {}}`, nil, []want{
			{"steps[0].kind", `step kind "inference" is not supported by this runtime (it runs container, ray, spark)`},
		}},
		{"problems everywhere, in document order", `
placement: {strategy: random}
rayClusters:
  - {name: pool}
params:
  - {name: P, type: text}
steps:
  - {name: a, kind: ray, ray: {entrypoint: x, cluster: pol}}
  - {name: b, kind: spark, spark: {type: Python, image: s, mainApplicationFile: x, driver: {memory: 2Gi}}}`, nil, []want{
			{"params[0].type", `unknown type "text"`},
			{"placement.strategy", `unknown strategy "random"`},
			{"rayClusters[0].image", "required"},
			{"steps[0].ray.cluster", `unknown ray cluster "pol" (did you mean "pool"?)`},
			{"steps[1].spark.driver.memory", `invalid Spark memory "2Gi"`},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := kubeOpts
			if tc.opts != nil {
				opts = *tc.opts
			}
			checkProblems(t, problemsOf(t, Validate(mustParse(t, tc.spec), opts)), tc.want)
		})
	}
}

// fullKubeYAML uses every Kubernetes feature once.
const fullKubeYAML = `
name: full
params:
  - {name: lr, type: number, default: 0.01}
  - {name: date, type: string, default: "2024-01-01"}
placement: {strategy: most-free-gpus}
rayClusters:
  - name: shared
    image: rayproject/ray:2.9.3-py310
    head: {cpu: "1", memory: 2Gi}
    workers: [{name: cpu, replicas: 1, minReplicas: 1, maxReplicas: 3, cpu: "2", memory: 4Gi}]
    placement: {selector: {region: eu}}
steps:
  - name: etl
    kind: spark
    spark:
      type: Scala
      image: spark:3.5.1
      mainClass: com.example.Etl
      mainApplicationFile: local:///opt/etl.jar
      arguments: ["--date={{ params.date }}"]
      sparkConf: {spark.app.name: "etl-{{ run.id }}"}
      driver: {cores: 1, memory: 1g}
      executor: {cores: 2, memory: 4g, instances: 3, gpu: 1, gpuType: NVIDIA-L4}
  - name: train
    kind: ray
    forEach: {items: [0.01, 0.1]}
    ray:
      entrypoint: "python train.py --rows {{ steps.etl.outputs.rows }} --lr {{ item }}"
      runtimeEnv: {env_vars: {LR: "{{ item }}"}, pip: [torch]}
      image: rayproject/ray:2.9.3-py310-gpu
      head: {cpu: "2", memory: 8Gi}
      workers:
        - {name: small, replicas: 1, gpu: 1, gpuType: NVIDIA-L4}
        - {name: big, replicas: 2, gpu: 4, gpuType: NVIDIA-A100-SXM4-80GB}
      shutdownAfterJobFinishes: true
      ttlSecondsAfterFinished: 60
      activeDeadlineSeconds: 3600
  - name: eval
    kind: ray
    ray: {cluster: shared, entrypoint: "python eval.py --n {{ len(steps.train.outputs) }}"}
  - name: report
    placement: {cluster: dev-1}
    container:
      command: [report, "{{ steps.eval.outputs.acc }}"]
      resources: {cpu: 500m, memory: 256Mi, gpu: 1}
`

func TestValidateFullKubePipeline(t *testing.T) {
	p := mustParse(t, fullKubeYAML)
	if err := Validate(p, kubeOpts); err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, ValidateOptions{Kinds: []StepKind{KindContainer}, Kubernetes: true}); err == nil {
		t.Fatal("ray and spark steps validated for a runtime without them")
	}
	if got, want := fmt.Sprint(Dependencies(p)), "[[] [0] [1] [2]]"; got != want {
		t.Errorf("Dependencies = %s, want %s", got, want)
	}
	// Embedded fields are decoded (they are written flat in the spec).
	tr := p.Steps[1].Ray
	if tr.Image != "rayproject/ray:2.9.3-py310-gpu" || tr.Workers[1].GPU != 4 || tr.Workers[1].Name != "big" || *tr.ShutdownAfterJobFinishes != true {
		t.Errorf("ray step decoded as %+v", tr)
	}
	// JSON round trip keeps everything.
	js := canonical(t, p)
	if got := canonical(t, mustParse(t, js)); got != js {
		t.Errorf("round trip changed the pipeline:\n%s\n%s", js, got)
	}
}

func TestParseKubeFields(t *testing.T) {
	_, err := Parse([]byte(`
steps:
  - name: a
    kind: ray
    ray:
      entrypoint: x
      imgae: ray
      RayClusterTemplate: {}
      workers: [{name: w, replica: 1, gpus: 1}]
    placement: {clutser: x}
    container: {command: [x], resources: {cpu: 1}}
rayClusters: [{name: p, image: r, head: {gpu: "1"}}]
`))
	// YAML keys reach the checker sorted (sigs.k8s.io/yaml), hence the order.
	checkProblems(t, problemsOf(t, err), []want{
		{"rayClusters[0].head.gpu", `must be a whole number, got string "1"`},
		{"steps[0].container.resources.cpu", "must be a string, got number 1 (quote it in YAML)"},
		{"steps[0].placement.clutser", `unknown field "clutser" (did you mean "cluster"?)`},
		{"steps[0].ray.RayClusterTemplate", `unknown field "RayClusterTemplate"`},
		{"steps[0].ray.imgae", `unknown field "imgae" (did you mean "image"?)`},
		{"steps[0].ray.workers[0].gpus", `unknown field "gpus" (did you mean "gpu"?)`},
		{"steps[0].ray.workers[0].replica", `unknown field "replica" (did you mean "replicas"?)`},
	})
}

func TestExampleRaySparkPipeline(t *testing.T) {
	data, err := os.ReadFile("../examples/pipelines/ray-spark.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, kubeOpts); err != nil {
		t.Fatal(err)
	}
	// Without a cluster, everything Kubernetes-only is reported.
	checkProblems(t, problemsOf(t, Validate(p, localOpts)), []want{
		{"rayClusters", "need a Kubernetes cluster"},
		{"steps[0].kind", `step kind "spark" needs a Kubernetes cluster`},
		{"steps[1].kind", `step kind "ray" needs a Kubernetes cluster`},
		{"steps[2].kind", `step kind "ray" needs a Kubernetes cluster`},
		{"steps[3].kind", `step kind "ray" needs a Kubernetes cluster`},
		{"steps[4].placement", "placement needs a Kubernetes cluster"},
	})
	if diff := cmp.Diff([][]int{{}, {0}, {1}, {1}, {2, 3}}, Dependencies(p)); diff != "" {
		t.Fatalf("Dependencies (-want +got):\n%s", diff)
	}
	params, err := ResolveParams(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Params: params, Run: RunEnv{ID: "r1", Project: "demo", Pipeline: "ray-spark"}}

	sp, err := RenderSpark(p.Steps[0].Spark, env)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"--input=s3://atelier-demo/raw/events/date=2024-06-01", "--output=s3://atelier-demo/runs/r1/features"}, sp.Arguments); diff != "" {
		t.Errorf("spark arguments (-want +got):\n%s", diff)
	}
	if sp.SparkConf["spark.app.name"] != "features-r1" {
		t.Errorf("sparkConf = %v", sp.SparkConf)
	}

	train := &p.Steps[1]
	r, err := RenderRay(train.Ray, env)
	if err != nil {
		t.Fatal(err)
	}
	if want := "python train.py --data s3://atelier-demo/runs/r1/features --model s3://atelier-demo/runs/r1/model --epochs 10 --lr 0.001"; r.Entrypoint != want {
		t.Errorf("entrypoint = %q, want %q", r.Entrypoint, want)
	}
	if r.RuntimeEnv["working_dir"] != "s3://atelier-demo/code/trainer.zip" || r.RuntimeEnv["env_vars"].(map[string]any)["ATELIER_RUN"] != "r1" {
		t.Errorf("runtimeEnv = %v", r.RuntimeEnv)
	}
	if n, typ := train.GPURequest(); n != 1 || typ != "NVIDIA-A100-SXM4-80GB" {
		t.Errorf("train GPURequest = %d, %q", n, typ)
	}
	for _, i := range []int{2, 3} {
		s := &p.Steps[i]
		if s.Ray.Cluster != "eval" {
			t.Errorf("%s: cluster %q", s.Name, s.Ray.Cluster)
		}
		if _, err := RenderRay(s.Ray, env); err != nil {
			t.Error(err)
		}
	}
	report := &p.Steps[4]
	if pl := report.EffectivePlacement(p); pl == nil || !reflect.DeepEqual(pl.Selector, map[string]string{"env": "dev"}) {
		t.Errorf("report placement = %+v", pl)
	}
	if pl := train.EffectivePlacement(p); pl != nil {
		t.Errorf("train placement = %+v, want none", pl)
	}
	c, err := RenderContainer(report.Container, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Args[1] != "--title=Model ray-spark (2024-06-01)" || c.Resources == nil || c.Resources.Memory != "512Mi" {
		t.Errorf("report container = %+v", c)
	}
}

func TestDependenciesKube(t *testing.T) {
	p := mustParse(t, `
steps:
  - {name: a, container: {command: [x]}}
  - {name: b, container: {command: [x]}}
  - {name: c, container: {command: [x]}}
  - {name: d, container: {command: [x]}}
  - name: ray-entry
    kind: ray
    ray: {entrypoint: "run {{ steps.a.outputs.x }}", image: r}
  - name: ray-env
    kind: ray
    ray: {entrypoint: x, image: r, runtimeEnv: {env_vars: {X: "{{ steps.b.outputs.x }}"}, pip: ["{{ steps.c.outputs.pkg }}"], "n": 1}}
  - name: spark-file
    kind: spark
    spark: {type: Python, image: s, mainApplicationFile: "{{ steps.d.outputs.file }}"}
  - name: spark-args
    kind: spark
    spark: {type: Python, image: s, mainApplicationFile: x, arguments: ["{{ steps.a.outputs.x }}"], sparkConf: {k: "{{ steps['ray-entry'].outputs.v }}"}}
  - name: cyc
    kind: ray
    ray: {entrypoint: "{{ steps.cyc2.outputs.x }}", image: r}
  - name: cyc2
    kind: spark
    spark: {type: Python, image: s, mainApplicationFile: "{{ steps.cyc.outputs.x }}"}
`)
	checkProblems(t, problemsOf(t, Validate(p, kubeOpts)), []want{
		{"steps[8]", "dependency cycle: cyc -> cyc2 -> cyc"},
	})
	p.Steps = p.Steps[:8]
	if err := Validate(p, kubeOpts); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(Dependencies(p)), "[[] [] [] [] [0] [1 2] [3] [0 4]]"; got != want {
		t.Errorf("Dependencies = %s, want %s", got, want)
	}
}

func TestRenderRay(t *testing.T) {
	yes := true
	in := &RayStep{
		Entrypoint: "python t.py --lr {{ item.lr }} --rows {{ steps.prepare.outputs.rows }}",
		RuntimeEnv: map[string]any{
			"env_vars":    map[string]any{"NAME": "{{ item.name }}", "N": 3.0},
			"pip":         []any{"torch", "{{ params.dataset }}-lib"},
			"working_dir": "/w/{{ run.id }}",
			"config":      map[string]any{"flag": true, "none": nil, "deep": []any{map[string]any{"x": "{{ params.epochs }}"}}},
		},
		RayClusterTemplate: RayClusterTemplate{
			Image:   "ray:{{ not rendered }}",
			Head:    Resources{CPU: "1"},
			Workers: []RayWorkerGroup{{Name: "w", Replicas: 1, Resources: Resources{GPU: 1}}},
		},
		ShutdownAfterJobFinishes: &yes,
		TTLSecondsAfterFinished:  5,
	}
	before, _ := json.Marshal(in)
	out, err := RenderRay(in, testEnv())
	if err != nil {
		t.Fatal(err)
	}
	want := &RayStep{
		Entrypoint: "python t.py --lr 0.1 --rows 150",
		RuntimeEnv: map[string]any{
			"env_vars":    map[string]any{"NAME": "b", "N": 3.0},
			"pip":         []any{"torch", "iris-lib"},
			"working_dir": "/w/run-1",
			"config":      map[string]any{"flag": true, "none": nil, "deep": []any{map[string]any{"x": "3"}}},
		},
		RayClusterTemplate:       in.RayClusterTemplate,
		ShutdownAfterJobFinishes: &yes,
		TTLSecondsAfterFinished:  5,
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Fatalf("RenderRay (-want +got):\n%s", diff)
	}
	// The output shares nothing mutable with the input.
	out.Workers[0].Name = "changed"
	*out.ShutdownAfterJobFinishes = false
	out.RuntimeEnv["env_vars"].(map[string]any)["NAME"] = "changed"
	out.RuntimeEnv["config"].(map[string]any)["deep"].([]any)[0].(map[string]any)["x"] = "changed"
	if after, _ := json.Marshal(in); string(after) != string(before) {
		t.Errorf("RenderRay modified its input:\n%s\n%s", before, after)
	}

	for _, tc := range []struct {
		r    *RayStep
		want string
	}{
		{nil, "step has no ray"},
		{&RayStep{Entrypoint: "{{ params.nope }}"}, `entrypoint: {{ params.nope }}: params has no key "nope"`},
		{&RayStep{Entrypoint: "x", RuntimeEnv: map[string]any{
			"b": []any{"ok", "{{ item.zz }}"},
			"a": map[string]any{"y": "{{ params.y }}", "x": "{{ params.x }}"},
		}}, `runtimeEnv.a.x: {{ params.x }}: params has no key "x"`},
		{&RayStep{Entrypoint: "x", RuntimeEnv: map[string]any{"b": []any{"ok", "{{ item.zz }}"}}}, `runtimeEnv.b[1]: {{ item.zz }}: item has no key "zz"`},
	} {
		_, err := RenderRay(tc.r, testEnv())
		if err == nil || err.Error() != tc.want {
			t.Errorf("RenderRay error = %v, want %q", err, tc.want)
		}
	}
	// Absent optional fields stay absent.
	out, err = RenderRay(&RayStep{Entrypoint: "x", Cluster: "c"}, testEnv())
	if err != nil {
		t.Fatalf("RenderRay: %v", err)
	}
	if diff := cmp.Diff(&RayStep{Entrypoint: "x", Cluster: "c"}, out); diff != "" {
		t.Errorf("RenderRay (-want +got):\n%s", diff)
	}
}

func TestRenderSpark(t *testing.T) {
	in := &SparkStep{
		Type: "Scala", Image: "spark", MainClass: "{{ kept }}",
		MainApplicationFile: "s3://b/{{ params.dataset }}.jar",
		Arguments:           []string{"--epochs={{ params.epochs }}", "--item={{ item.name }}"},
		SparkConf:           map[string]string{"spark.app.name": "{{ run.pipeline }}-{{ run.id }}", "spark.x": "1"},
		Driver:              SparkRole{Cores: 1, Memory: "1g"},
		Executor:            SparkRole{Cores: 2, Memory: "2g", Instances: 3, GPU: 1, GPUType: "NVIDIA-L4"},
	}
	before, _ := json.Marshal(in)
	out, err := RenderSpark(in, testEnv())
	if err != nil {
		t.Fatal(err)
	}
	want := *in
	want.MainApplicationFile = "s3://b/iris.jar"
	want.Arguments = []string{"--epochs=3", "--item=b"}
	want.SparkConf = map[string]string{"spark.app.name": "pipe-run-1", "spark.x": "1"}
	if diff := cmp.Diff(&want, out); diff != "" {
		t.Fatalf("RenderSpark (-want +got):\n%s", diff)
	}
	out.Arguments[0] = "changed"
	out.SparkConf["spark.x"] = "changed"
	if after, _ := json.Marshal(in); string(after) != string(before) {
		t.Errorf("RenderSpark modified its input:\n%s\n%s", before, after)
	}
	for _, tc := range []struct {
		s    *SparkStep
		want string
	}{
		{nil, "step has no spark"},
		{&SparkStep{MainApplicationFile: "{{ params.f }}"}, `mainApplicationFile: {{ params.f }}: params has no key "f"`},
		{&SparkStep{Arguments: []string{"a", "{{ 1 + }}"}}, "arguments[1]: {{ 1 + }}: unexpected token EOF"},
		{&SparkStep{SparkConf: map[string]string{"z": "{{ params.z }}", "spark.a": "{{ params.a }}"}}, `sparkConf["spark.a"]: {{ params.a }}: params has no key "a"`},
	} {
		_, err := RenderSpark(tc.s, testEnv())
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("RenderSpark error = %v, want %q", err, tc.want)
		}
	}
	out, err = RenderSpark(&SparkStep{Type: "R", MainApplicationFile: "x"}, testEnv())
	if err != nil {
		t.Fatalf("RenderSpark: %v", err)
	}
	if diff := cmp.Diff(&SparkStep{Type: "R", MainApplicationFile: "x"}, out); diff != "" {
		t.Errorf("RenderSpark (-want +got):\n%s", diff)
	}
}

func TestRenderContainerKeepsResources(t *testing.T) {
	in := &Container{Command: []string{"x"}, Resources: &Resources{CPU: "1", GPU: 2, GPUType: "T4"}}
	out, err := RenderContainer(in, testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.Resources, in.Resources) || out.Resources == in.Resources {
		t.Errorf("resources = %+v (same pointer: %v)", out.Resources, out.Resources == in.Resources)
	}
}

func TestGPURequestAndPlacement(t *testing.T) {
	res := func(gpu int, typ string) Resources { return Resources{GPU: gpu, GPUType: typ} }
	cases := []struct {
		name string
		step Step
		n    int
		typ  string
	}{
		{"container without resources", Step{Container: &Container{}}, 0, ""},
		{"container", Step{Kind: KindContainer, Container: &Container{Resources: &Resources{GPU: 2, GPUType: "T4"}}}, 2, "T4"},
		{"ray head only", Step{Kind: KindRay, Ray: &RayStep{RayClusterTemplate: RayClusterTemplate{Head: res(1, "L4")}}}, 1, "L4"},
		{"ray largest single pod wins", Step{Kind: KindRay, Ray: &RayStep{RayClusterTemplate: RayClusterTemplate{
			Head: res(0, ""),
			Workers: []RayWorkerGroup{
				{Name: "a", Replicas: 8, Resources: res(1, "L4")},
				{Name: "b", Replicas: 1, Resources: res(4, "A100")},
				{Name: "c", Replicas: 1, Resources: res(4, "H100")},
			}}}}, 4, "A100"},
		{"ray on a shared cluster", Step{Kind: KindRay, Ray: &RayStep{Cluster: "x", RayClusterTemplate: RayClusterTemplate{Head: res(1, "")}}}, 0, ""},
		{"spark driver", Step{Kind: KindSpark, Spark: &SparkStep{Driver: SparkRole{GPU: 1, GPUType: "T4"}}}, 1, "T4"},
		{"spark executor", Step{Kind: KindSpark, Spark: &SparkStep{Driver: SparkRole{GPU: 1, GPUType: "T4"}, Executor: SparkRole{GPU: 2, GPUType: "L4", Instances: 10}}}, 2, "L4"},
		{"block of another kind is ignored", Step{Kind: KindSpark, Container: &Container{Resources: &Resources{GPU: 1}}}, 0, ""},
	}
	for _, tc := range cases {
		if n, typ := tc.step.GPURequest(); n != tc.n || typ != tc.typ {
			t.Errorf("%s: GPURequest = %d, %q; want %d, %q", tc.name, n, typ, tc.n, tc.typ)
		}
	}
	shared := SharedRayCluster{RayClusterTemplate: RayClusterTemplate{Workers: []RayWorkerGroup{{Resources: res(2, "A10")}}}}
	if n, typ := shared.GPURequest(); n != 2 || typ != "A10" {
		t.Errorf("shared GPURequest = %d, %q", n, typ)
	}

	pp := &Placement{Strategy: StrategyFirst}
	sp := &Placement{Cluster: "east"}
	for _, tc := range []struct {
		step Step
		p    *Spec
		want *Placement
	}{
		{Step{}, nil, nil},
		{Step{}, &Spec{}, nil},
		{Step{}, &Spec{Placement: pp}, pp},
		{Step{Placement: sp}, &Spec{Placement: pp}, sp},
		{Step{Placement: sp}, nil, sp},
	} {
		if got := tc.step.EffectivePlacement(tc.p); got != tc.want {
			t.Errorf("EffectivePlacement(%+v, %+v) = %+v, want %+v", tc.step.Placement, tc.p, got, tc.want)
		}
	}
}

// Rendering keeps a ray or spark step's secret references as they are
// (the cluster's worker resolves them).
func TestRenderRaySparkKeepsSecrets(t *testing.T) {
	refs := []SecretEnv{{Name: "hf-token", Env: "HF_TOKEN"}, {Name: "gcp-sa", File: "creds.json"}}
	r, err := RenderRay(&RayStep{Entrypoint: "python {{ params.x }}", Secrets: refs}, Env{Params: map[string]any{"x": "t.py"}})
	if err != nil || r.Entrypoint != "python t.py" || !reflect.DeepEqual(r.Secrets, refs) {
		t.Errorf("RenderRay = %+v, %v", r, err)
	}
	s, err := RenderSpark(&SparkStep{MainApplicationFile: "local:///{{ params.x }}", Secrets: refs}, Env{Params: map[string]any{"x": "a.py"}})
	if err != nil || s.MainApplicationFile != "local:///a.py" || !reflect.DeepEqual(s.Secrets, refs) {
		t.Errorf("RenderSpark = %+v, %v", s, err)
	}
}

// A ray job declares artifacts as a container does, checked by the same
// rules at its own path, and other steps read its outputs.
func TestValidateRayArtifacts(t *testing.T) {
	p := mustParse(t, `
steps:
  - name: prep
    container: {command: [x], artifacts: {outputs: [{name: data, type: dataset}]}}
  - name: train
    kind: ray
    ray:
      entrypoint: python train.py
      image: ray
      artifacts:
        inputs: [{name: data, from: prep.data}]
        outputs: [{name: model, path: ckpt/final, register: fraud}]
  - name: eval
    container: {command: [x], artifacts: {inputs: [{name: m, from: train.model}]}}
  - {name: promote, kind: promote, promote: {model: fraud, alias: champion, from: train.model}}
  - name: score
    kind: spark
    spark:
      type: Python
      image: spark
      mainApplicationFile: local:///x.py
      artifacts: {inputs: [{name: m, from: train.model}], outputs: [{name: scores, type: dataset}]}
  - {name: report, container: {command: [x], artifacts: {inputs: [{name: s, from: score.scores}]}}}
artifacts:
  - {name: model, from: train.model}
`)
	if err := Validate(p, kubeOpts); err != nil {
		t.Fatal(err)
	}
	if got := Dependencies(p); !reflect.DeepEqual(got, [][]int{{}, {0}, {1}, {1}, {1}, {4}}) {
		t.Fatalf("dependencies %v, want train on prep; eval, promote and score on train; report on score", got)
	}
	if got := p.Steps[1].DeclaredArtifacts(); got == nil || got.Outputs[0].Name != "model" {
		t.Fatalf("DeclaredArtifacts of the ray step = %+v", got)
	}

	bad := mustParse(t, `
steps:
  - name: train
    kind: ray
    ray:
      entrypoint: python train.py
      image: ray
      artifacts:
        inputs: [{name: Data, from: nope.data}, {name: m, artifact: "{{ params.nope }}"}]
        outputs: [{name: model, path: ../x}, {name: model}]
  - {name: eval, container: {command: [x], artifacts: {inputs: [{name: m, from: train.weights}]}}}
  - name: etl
    kind: spark
    spark: {type: Python, image: spark, mainApplicationFile: local:///x.py, artifacts: {outputs: [{name: out, path: /abs}]}}
`)
	checkProblems(t, problemsOf(t, Validate(bad, kubeOpts)), []want{
		{"steps[0].ray.artifacts.outputs[0].path", "must be a clean path"},
		{"steps[0].ray.artifacts.outputs[1].name", `"model" is declared twice`},
		{"steps[0].ray.artifacts.inputs[0].name", `"Data" is not an artifact name`},
		{"steps[0].ray.artifacts.inputs[0].from", `no step named "nope"`},
		{"steps[0].ray.artifacts.inputs[1].artifact", "params.nope"},
		{"steps[1].container.artifacts.inputs[0].from", `step "train" declares no output artifact named "weights"`},
		{"steps[2].spark.artifacts.outputs[0].path", "must be relative"},
	})
}
