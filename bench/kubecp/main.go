// Command kubecp measures internal/stack/kubetest's Kubernetes control plane
// (kube-apiserver + etcd + kube-controller-manager + kube-scheduler + kwok +
// the KubeRay operator) on this machine:
//
//   - startup: the first start of the program (binaries possibly not in the
//     page cache yet) and -starts more, median and spread, split into API
//     server, CRDs and the rest of the control plane;
//
//   - fleet: creating -nodes mixed fake GPU nodes (kubetest.CreateNodes)
//     until kwok reports them all Ready;
//
//   - scheduling: -pods pods (10m CPU each, created by -writers parallel
//     clients) until the scheduler has bound them all and until kwok
//     reports them all Running: pods per second;
//
//   - memory: the RSS of each component with the fleet and the pods in place.
//
//     go run ./bench/kubecp [-starts 3] [-nodes 1000] [-pods 10000] [-writers 32] [-quick]
//
// Binaries must be built (make ensure-kube). The report (markdown) goes to
// stdout, progress to stderr.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func main() {
	starts := flag.Int("starts", 3, "control-plane starts after the first, for the warm figures")
	nodes := flag.Int("nodes", 1000, "fake nodes")
	pods := flag.Int("pods", 10000, "pods to schedule")
	writers := flag.Int("writers", 32, "parallel pod creators")
	quick := flag.Bool("quick", false, "smoke run: -starts 1 -nodes 100 -pods 500 unless given")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["starts"] {
			*starts = 1
		}
		if !set["nodes"] {
			*nodes = 100
		}
		if !set["pods"] {
			*pods = 500
		}
	}
	if err := run(*starts, *nodes, *pods, *writers); err != nil {
		fmt.Fprintln(os.Stderr, "kubecp:", err)
		os.Exit(1)
	}
}

type startup struct{ api, crds, cp, total time.Duration }

func startOnce() (*kubetest.Cluster, startup, error) {
	t0 := time.Now()
	c, err := kubetest.StartControlPlaneCluster(benchstack.Logf)
	if err != nil {
		return nil, startup{}, err
	}
	return c, startup{c.StartupTime, c.CRDTime, c.ControlPlaneTime, time.Since(t0)}, nil
}

func run(starts, nodes, pods, writers int) error {
	load := loadAvg()
	var ups []startup
	// Start 1+starts times; measure on the last cluster, stop the others.
	for i := 0; i <= starts; i++ {
		benchstack.Logf("control-plane start %d/%d", i+1, starts+1)
		c, s, err := startOnce()
		if err != nil {
			return err
		}
		ups = append(ups, s)
		if i < starts {
			if err := c.Stop(); err != nil {
				return err
			}
			continue
		}
		defer func() { _ = c.Stop() }()
		return measure(c, ups, nodes, pods, writers, load)
	}
	return nil
}

func measure(c *kubetest.Cluster, ups []startup, nodes, pods, writers int, load string) error {
	ctx := context.Background()
	kube := c.Clientset()

	benchstack.Logf("creating %d nodes", nodes)
	t0 := time.Now()
	if err := kubetest.CreateNodes(ctx, kube, kubetest.MixedGPUNodes("bench", nodes, kubetest.DefaultMix)); err != nil {
		return err
	}
	created := time.Since(t0)
	if err := waitUntil(ctx, func() (bool, error) { return countReadyNodes(ctx, kube, nodes) }); err != nil {
		return err
	}
	ready := time.Since(t0)
	rssNodes := rss(c)

	ns := "bench"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	benchstack.Logf("creating %d pods with %d writers", pods, writers)
	t1 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= pods {
					return
				}
				p := kubetest.MakePod("p-"+strconv.Itoa(i), ns).Request(corev1.ResourceCPU, "10m").Obj()
				p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("16Mi")
				if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	createdPods := time.Since(t1)
	var bound, running time.Duration
	err := waitUntil(ctx, func() (bool, error) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		nb, nr := 0, 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				nb++
			}
			if p.Status.Phase == corev1.PodRunning {
				nr++
			}
		}
		if nb == pods && bound == 0 {
			bound = time.Since(t1)
		}
		if nr == pods {
			running = time.Since(t1)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	time.Sleep(5 * time.Second) // let the components settle before reading memory
	rssPods := rss(c)

	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	fmt.Fprintf(w, "## kubecp: the kubetest control plane\n\n")
	fmt.Fprintf(w, "`%s` — %s, %s/%s, %d CPUs, load at start %s, %s\n\n", benchstack.CommandLine("kubecp"),
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), load, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Kubernetes %s, kwok %s, KubeRay %s.\n\n", kubetest.KubeVersion, kubetest.KwokVersion, kubetest.KubeRayOperatorVersion)
	fmt.Fprintf(w, "### Startup (binaries built)\n\n| start | API server + etcd | CRDs | controllers, scheduler, kwok, KubeRay | total |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| first | %s | %s | %s | %s |\n", sec(ups[0].api), sec(ups[0].crds), sec(ups[0].cp), sec(ups[0].total))
	if len(ups) > 1 {
		warm := ups[1:]
		col := func(f func(startup) time.Duration) string {
			var d []time.Duration
			for _, u := range warm {
				d = append(d, f(u))
			}
			lo, hi := benchstack.MinMax(d)
			return fmt.Sprintf("%s (%s–%s)", sec(benchstack.Pct(sorted(d), 50)), sec(lo), sec(hi))
		}
		fmt.Fprintf(w, "| next %d: median (min–max) | %s | %s | %s | %s |\n", len(warm),
			col(func(u startup) time.Duration { return u.api }), col(func(u startup) time.Duration { return u.crds }),
			col(func(u startup) time.Duration { return u.cp }), col(func(u startup) time.Duration { return u.total }))
	}
	fmt.Fprintf(w, "\n### Fleet and scheduling\n\n")
	fmt.Fprintf(w, "- %d mixed fake GPU nodes (H100×8, A100×8, L4×1, MIG A100, CPU): created in %s, all Ready (kwok) after %s\n", nodes, sec(created), sec(ready))
	fmt.Fprintf(w, "- %d pods created in %s (%d writers, %.0f creates/s)\n", pods, sec(createdPods), writers, float64(pods)/createdPods.Seconds())
	fmt.Fprintf(w, "- all bound by the scheduler after %s: **%.0f pods scheduled/s** (from the first create)\n", sec(bound), float64(pods)/bound.Seconds())
	fmt.Fprintf(w, "- all Running (kwok) after %s: %.0f pods/s\n\n", sec(running), float64(pods)/running.Seconds())
	fmt.Fprintf(w, "### Memory (RSS, MiB)\n\n| component | %d nodes | + %d pods |\n|---|---|---|\n", nodes, pods)
	names := make([]string, 0, len(rssPods))
	for n := range rssPods {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "| %s | %d | %d |\n", n, rssNodes[n]>>20, rssPods[n]>>20)
	}
	return nil
}

func sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

func sec(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func countReadyNodes(ctx context.Context, kube kubernetes.Interface, want int) (bool, error) {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return false, err
	}
	n := 0
	for _, node := range list.Items {
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n >= want, nil
}

func waitUntil(ctx context.Context, cond func() (bool, error)) error {
	deadline := time.Now().Add(30 * time.Minute)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after 30 min")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// rss reads each component's resident set size from /proc (Linux).
func rss(c *kubetest.Cluster) map[string]int64 {
	out := map[string]int64{}
	for name, pid := range c.PIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				out[name] = kb << 10
			}
		}
	}
	return out
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
