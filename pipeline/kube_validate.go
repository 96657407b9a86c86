package pipeline

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/atelier-ml/atelier/schema"
)

var (
	// rayClusterNameRE is shorter than a step name because the RayCluster's
	// Kubernetes name is derived from it and the run.
	rayClusterNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)
	kubeClusterRE    = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	// dnsLabelRE is a DNS-1123 label (length checked separately).
	dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// labelValueRE is a Kubernetes label value (length checked separately).
	labelValueRE        = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	sparkMemoryRE       = regexp.MustCompile(`^[0-9]+[kmgtKMGT]?$`)
	sparkTypes          = []string{"Python", "Scala", "Java", "R"}
	placementStrategies = []string{StrategyMostFreeGPUs, StrategyFirst}
)

// validateRayClusters checks Pipeline.RayClusters and records their names in
// vc for the ray steps that refer to them. A cluster no step uses is fine.
func validateRayClusters(p *Spec, vc *vctx, ps *problems) {
	if len(p.RayClusters) > 0 && !vc.kube {
		ps.add("rayClusters", "shared Ray clusters need a Kubernetes cluster; the local runtime runs only container steps")
	}
	for j := range p.RayClusters {
		c := &p.RayClusters[j]
		cp := index("rayClusters", j)
		switch {
		case c.Name == "":
			ps.add(field(cp, "name"), "required")
		case !rayClusterNameRE.MatchString(c.Name):
			ps.add(field(cp, "name"), "invalid ray cluster name %q: use lowercase letters, digits and '-', starting with a letter, at most 31 characters", c.Name)
		}
		if c.Name != "" {
			if k, dup := vc.rayClusters[c.Name]; dup {
				ps.add(field(cp, "name"), "duplicate ray cluster name %q (also rayClusters[%d])", c.Name, k)
			} else {
				vc.rayClusters[c.Name] = j
			}
		}
		validateClusterTemplate(cp, &c.RayClusterTemplate, "required: the Ray image of the shared cluster", ps)
		if c.Placement != nil {
			validatePlacement(field(cp, "placement"), c.Placement, ps)
		}
	}
}

// validateRay checks a ray step's configuration except its templates (see
// rayTemplates).
func validateRay(path string, r *RayStep, vc *vctx, ps *problems) {
	if strings.TrimSpace(r.Entrypoint) == "" {
		ps.add(field(path, "entrypoint"), "required: the command Ray runs, such as \"python train.py\"")
	}
	if r.Cluster == "" {
		validateClusterTemplate(path, &r.RayClusterTemplate, "required: the Ray image of the job's cluster (or set cluster to use one of the pipeline's rayClusters)", ps)
		if r.TTLSecondsAfterFinished < 0 {
			ps.add(field(path, "ttlSecondsAfterFinished"), "must not be negative, got %d", r.TTLSecondsAfterFinished)
		}
		if r.ActiveDeadlineSeconds < 0 {
			ps.add(field(path, "activeDeadlineSeconds"), "must not be negative, got %d", r.ActiveDeadlineSeconds)
		}
		checkSecretRefs(field(path, "secrets"), r.Secrets, func(env string) string {
			if vars, ok := r.RuntimeEnv["env_vars"].(map[string]any); ok {
				if _, clash := vars[env]; clash {
					return fmt.Sprintf("%s is also set in runtimeEnv.env_vars, which Ray puts over the pods' environment: one value per variable", env)
				}
			}
			return ""
		}, ps)
		return
	}

	if _, ok := vc.rayClusters[r.Cluster]; !ok {
		names := make([]string, 0, len(vc.rayClusters))
		for n := range vc.rayClusters {
			names = append(names, n)
		}
		sort.Strings(names)
		msg := fmt.Sprintf("unknown ray cluster %q", r.Cluster)
		switch sg := suggest(r.Cluster, names); {
		case len(names) == 0:
			msg += ": the pipeline declares no rayClusters"
		case sg != "":
			msg += fmt.Sprintf(" (did you mean %q?)", sg)
		default:
			msg += fmt.Sprintf("; rayClusters has %s", strings.Join(names, ", "))
		}
		ps.add(field(path, "cluster"), "%s", msg)
	}
	defined := fmt.Sprintf("must be empty when cluster is set: the shared cluster %q defines it", r.Cluster)
	ownOnly := fmt.Sprintf("must be empty when cluster is set: it applies only to a job with its own RayCluster, not to the shared cluster %q", r.Cluster)
	if r.Image != "" {
		ps.add(field(path, "image"), "%s", defined)
	}
	if r.RayVersion != "" {
		ps.add(field(path, "rayVersion"), "%s", defined)
	}
	if r.Head != (Resources{}) {
		ps.add(field(path, "head"), "%s", defined)
	}
	if len(r.Workers) > 0 {
		ps.add(field(path, "workers"), "%s", defined)
	}
	if r.HeadPod != nil {
		ps.add(field(path, "headPod"), "%s", defined)
	}
	// pod stays: it is the job submitter's.
	checkPod(field(path, "pod"), r.Pod, ps)
	if r.ShutdownAfterJobFinishes != nil {
		ps.add(field(path, "shutdownAfterJobFinishes"), "%s", ownOnly)
	}
	if r.TTLSecondsAfterFinished != 0 {
		ps.add(field(path, "ttlSecondsAfterFinished"), "%s", ownOnly)
	}
	if r.ActiveDeadlineSeconds != 0 {
		ps.add(field(path, "activeDeadlineSeconds"), "%s", ownOnly)
	}
	if len(r.Secrets) > 0 {
		ps.add(field(path, "secrets"), "must be empty when cluster is set: the pods of the shared cluster %q are the run's, not this step's, so they cannot hold its secrets; give the job its own cluster (image, head, workers) to use secrets", r.Cluster)
	}
}

// validateClusterTemplate checks a RayCluster description: a ray step's own
// cluster or a shared one. Worker group fields are promoted, so their paths
// read workers[0].gpu.
func validateClusterTemplate(path string, t *RayClusterTemplate, imageMissing string, ps *problems) {
	switch {
	case strings.TrimSpace(t.Image) == "":
		ps.add(field(path, "image"), "%s", imageMissing)
	case strings.Contains(t.Image, "{{"):
		ps.add(field(path, "image"), "templates are not supported in image")
	}
	validateResources(field(path, "head"), &t.Head, ps)
	seen := map[string]int{}
	for j := range t.Workers {
		g := &t.Workers[j]
		gp := index(field(path, "workers"), j)
		switch {
		case g.Name == "":
			ps.add(field(gp, "name"), "required")
		case len(g.Name) > 63 || !dnsLabelRE.MatchString(g.Name):
			ps.add(field(gp, "name"), "invalid worker group name %q: use lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters", g.Name)
		}
		if g.Name != "" {
			if k, dup := seen[g.Name]; dup {
				ps.add(field(gp, "name"), "duplicate worker group name %q (also workers[%d])", g.Name, k)
			} else {
				seen[g.Name] = j
			}
		}
		if g.Replicas < 0 {
			ps.add(field(gp, "replicas"), "must not be negative, got %d", g.Replicas)
		}
		if g.MinReplicas < 0 {
			ps.add(field(gp, "minReplicas"), "must not be negative, got %d", g.MinReplicas)
		}
		if g.MaxReplicas < 0 {
			ps.add(field(gp, "maxReplicas"), "must not be negative, got %d", g.MaxReplicas)
		}
		if g.MinReplicas > 0 && g.Replicas >= 0 && g.MinReplicas > g.Replicas {
			ps.add(field(gp, "minReplicas"), "must not exceed replicas (%d), got %d", g.Replicas, g.MinReplicas)
		}
		if g.MaxReplicas > 0 && g.Replicas > g.MaxReplicas {
			ps.add(field(gp, "replicas"), "must not exceed maxReplicas (%d), got %d", g.MaxReplicas, g.Replicas)
		}
		validateResources(gp, &g.Resources, ps)
		checkPod(field(gp, "pod"), g.Pod, ps)
	}
	checkPod(field(path, "pod"), t.Pod, ps)
	checkPod(field(path, "headPod"), t.HeadPod, ps)
}

// checkPod validates pod settings written at pp: literal values only.
func checkPod(pp string, p *schema.Pod, ps *problems) {
	if p == nil {
		return
	}
	validatePod(pp, p, ps)
	if podHasTemplates(p) {
		ps.add(pp, "templates are not supported in pod settings")
	}
}

// rayTemplates calls fn with the path (relative to the ray block) and value
// of every templated string of a ray step, in a fixed order: entrypoint,
// then the string values of runtimeEnv by sorted key.
func rayTemplates(r *RayStep, fn func(path, v string)) {
	fn("entrypoint", r.Entrypoint)
	walkStrings("runtimeEnv", r.RuntimeEnv, fn)
}

// walkStrings visits the strings inside a JSON-like value (maps by sorted
// key, lists in order). Keys are not visited: they are names, not values.
func walkStrings(path string, v any, fn func(path, v string)) {
	switch x := v.(type) {
	case string:
		fn(path, x)
	case map[string]any:
		for _, k := range sortedStringKeys(x) {
			walkStrings(key(path, k), x[k], fn)
		}
	case map[string]string:
		for _, k := range sortedStringKeys(x) {
			fn(key(path, k), x[k])
		}
	case []any:
		for i, e := range x {
			walkStrings(index(path, i), e, fn)
		}
	case []string:
		for i, e := range x {
			fn(index(path, i), e)
		}
	}
}

func sortedStringKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validateSpark checks a spark step's configuration except its templates
// (see sparkTemplates).
func validateSpark(path string, sp *SparkStep, ps *problems) {
	tp := field(path, "type")
	types := strings.Join(sparkTypes, ", ")
	known := false
	for _, t := range sparkTypes {
		known = known || sp.Type == t
	}
	switch {
	case sp.Type == "":
		ps.add(tp, "required; use one of %s", types)
	case !known:
		msg := fmt.Sprintf("unknown type %q; use one of %s", sp.Type, types)
		if sg := suggest(sp.Type, sparkTypes); sg != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", sg)
		}
		ps.add(tp, "%s", msg)
	}
	switch {
	case strings.TrimSpace(sp.Image) == "":
		ps.add(field(path, "image"), "required: the Spark image of the driver and executors")
	case strings.Contains(sp.Image, "{{"):
		ps.add(field(path, "image"), "templates are not supported in image")
	}
	switch jvm := sp.Type == "Scala" || sp.Type == "Java"; {
	case jvm && strings.TrimSpace(sp.MainClass) == "":
		ps.add(field(path, "mainClass"), "required for a %s application", sp.Type)
	case !jvm && known && sp.MainClass != "":
		ps.add(field(path, "mainClass"), "only Scala and Java applications have a main class")
	}
	if strings.TrimSpace(sp.MainApplicationFile) == "" {
		ps.add(field(path, "mainApplicationFile"), "required: the application to run, such as \"local:///opt/app/etl.py\"")
	}
	if _, ok := sp.SparkConf[""]; ok {
		ps.add(key(field(path, "sparkConf"), ""), "empty configuration key")
	}
	for _, k := range sortedStringKeys(sp.SparkConf) {
		if why := ReservedSparkConf(k); why != "" {
			ps.add(key(field(path, "sparkConf"), k), "%s", why)
		}
	}
	validateSparkRole(field(path, "driver"), &sp.Driver, true, ps)
	validateSparkRole(field(path, "executor"), &sp.Executor, false, ps)
	checkPod(field(path, "pod"), sp.Pod, ps)
	checkSecretRefs(field(path, "secrets"), sp.Secrets, func(env string) string {
		for _, k := range []string{"spark.kubernetes.driverEnv." + env, "spark.executorEnv." + env} {
			if _, clash := sp.SparkConf[k]; clash {
				return fmt.Sprintf("%s is also set in sparkConf (%s): one value per variable", env, k)
			}
		}
		return ""
	}, ps)
}

// sparkTemplates calls fn with the path (relative to the spark block) and
// value of every templated string of a spark step, in a fixed order.
func sparkTemplates(sp *SparkStep, fn func(path, v string)) {
	fn("mainApplicationFile", sp.MainApplicationFile)
	for i, a := range sp.Arguments {
		fn(index("arguments", i), a)
	}
	for _, k := range sortedStringKeys(sp.SparkConf) {
		fn(key("sparkConf", k), sp.SparkConf[k])
	}
}

// reservedSparkConf are spark-submit settings a spark step may not set:
// Spark would create its pods from them past Atelier's pod settings and
// the cluster's policy (another namespace, host paths, any service
// account, whole Secrets, a pod template of the user's). Prefixes end in
// a dot.
var reservedSparkConf = []string{
	"spark.kubernetes.namespace",
	"spark.kubernetes.authenticate.",
	"spark.kubernetes.driver.volumes.", "spark.kubernetes.executor.volumes.",
	"spark.kubernetes.driver.secrets.", "spark.kubernetes.executor.secrets.",
	"spark.kubernetes.driver.secretKeyRef.", "spark.kubernetes.executor.secretKeyRef.",
	"spark.kubernetes.driver.podTemplateFile", "spark.kubernetes.executor.podTemplateFile",
	"spark.kubernetes.driver.podTemplateContainerName", "spark.kubernetes.executor.podTemplateContainerName",
	"spark.kubernetes.driver.pod.featureSteps", "spark.kubernetes.executor.pod.featureSteps",
	"spark.kubernetes.driver.pod.name",
	"spark.kubernetes.driver.master", "spark.master",
}

// ReservedSparkConf says why a spark step may not set sparkConf key k
// ("" when it may): the same check at validation and when the cluster's
// worker builds the SparkApplication.
func ReservedSparkConf(k string) string {
	for _, r := range reservedSparkConf {
		if k == r || strings.HasSuffix(r, ".") && strings.HasPrefix(k, r) {
			return fmt.Sprintf("%s is set by Atelier or would bypass the cluster's pod policy: use the step's pod settings (spark.pod, spark.driver.pod, spark.executor.pod) and secrets instead", k)
		}
	}
	return ""
}

func validateSparkRole(path string, r *SparkRole, driver bool, ps *problems) {
	checkPod(field(path, "pod"), r.Pod, ps)
	if r.Cores < 0 {
		ps.add(field(path, "cores"), "must not be negative, got %d", r.Cores)
	}
	if r.Memory != "" && !sparkMemoryRE.MatchString(r.Memory) {
		ps.add(field(path, "memory"), "invalid Spark memory %q: use JVM notation such as \"512m\" or \"4g\"", r.Memory)
	}
	switch {
	case r.Instances < 0:
		ps.add(field(path, "instances"), "must not be negative, got %d", r.Instances)
	case driver && r.Instances != 0:
		ps.add(field(path, "instances"), "only the executor has instances; there is one driver")
	}
	checkGPU(path, r.GPU, r.GPUType, ps)
}

// validateResources checks Kubernetes resource requests.
func validateResources(path string, r *Resources, ps *problems) {
	checkQuantity(field(path, "cpu"), r.CPU, false, ps)
	checkQuantity(field(path, "memory"), r.Memory, true, ps)
	checkGPU(path, r.GPU, r.GPUType, ps)
}

func checkQuantity(path, v string, memory bool, ps *problems) {
	if v == "" {
		return
	}
	examples := `"500m" or "2"`
	if memory {
		examples = `"512Mi" or "4Gi"`
	}
	q, err := resource.ParseQuantity(v)
	switch {
	case err != nil:
		ps.add(path, "invalid quantity %q: use Kubernetes syntax such as %s", v, examples)
	case q.Sign() < 0:
		ps.add(path, "must not be negative, got %q", v)
	case memory:
		// "512m" is valid Kubernetes syntax but means 0.512 bytes: almost
		// always Spark/JVM notation used by mistake.
		if c := q.DeepCopy(); !c.RoundUp(0) {
			ps.add(path, "%q is not a whole number of bytes (m means thousandths); use Kubernetes syntax such as %s", v, examples)
		}
	}
}

func checkGPU(path string, n int, typ string, ps *problems) {
	if n < 0 {
		ps.add(field(path, "gpu"), "must not be negative, got %d", n)
	}
	if typ == "" {
		return
	}
	if n <= 0 {
		ps.add(field(path, "gpuType"), "requires gpu > 0")
	}
	if len(typ) > 63 || !labelValueRE.MatchString(typ) {
		ps.add(field(path, "gpuType"), "invalid GPU type %q: it is matched against the nvidia.com/gpu.product node label, so use letters, digits, '-', '_' and '.', at most 63 characters", typ)
	}
}

// validatePlacement checks a placement (pipeline, step or shared cluster).
// Cluster names one cluster and so excludes selector and strategy; strategy
// may accompany selector, ordering the clusters that match it.
func validatePlacement(path string, pl *Placement, ps *problems) {
	if pl.Cluster == "" && len(pl.Selector) == 0 && pl.Strategy == "" {
		ps.add(path, "set cluster, selector or strategy, or leave placement out")
		return
	}
	if pl.Cluster != "" {
		if !kubeClusterRE.MatchString(pl.Cluster) {
			ps.add(field(path, "cluster"), "invalid cluster name %q: use lowercase letters, digits and '-', starting with a letter, at most 63 characters", pl.Cluster)
		}
		if len(pl.Selector) > 0 {
			ps.add(field(path, "selector"), "not allowed together with cluster, which names the cluster explicitly")
		}
		if pl.Strategy != "" {
			ps.add(field(path, "strategy"), "not allowed together with cluster, which names the cluster explicitly")
		}
	}
	if pl.Strategy != "" && pl.Cluster == "" {
		known := false
		for _, s := range placementStrategies {
			known = known || pl.Strategy == s
		}
		if !known {
			ps.add(field(path, "strategy"), "unknown strategy %q; use one of %s", pl.Strategy, strings.Join(placementStrategies, ", "))
		}
	}
	sp := field(path, "selector")
	for _, k := range sortedStringKeys(pl.Selector) {
		switch {
		case k == "":
			ps.add(key(sp, k), "empty label key")
		case pl.Selector[k] == "":
			ps.add(key(sp, k), "must not be empty")
		}
	}
}
