// Command realnode measures the real node of internal/stack/kubetest
// (kubelet, containerd, runc, CNI bridge, kube-proxy) on this machine:
//
//   - start-up: the node started and stopped -starts times on one control
//     plane: from the lock taken (after the sweep) to the node Ready, split
//     into containerd + images and the rest; and the stop, which restores
//     the host;
//
//   - pod start: -pods pods, one after the other, each running `echo` in the
//     busybox step image: from the create call to the pod Running/Succeeded
//     as seen by polling the API server every 20 ms. Baseline, interleaved
//     with the subject: the same pod on a kwok fake node, which exits at
//     once (what the control plane alone costs). And the same pod under
//     the step launcher, as a step with artifacts runs (framework.Wrap: an
//     init container copies it in, it runs `echo`; no artifacts, so no
//     transfer): what the launcher itself costs a step;
//
//   - memory: the RSS of kubelet, containerd and kube-proxy, and of the
//     containerd shims, with -hold sleeping pods running.
//
//     go run ./bench/realnode [-starts 3] [-pods 20] [-hold 5] [-quick]
//
// It needs root and the node's binaries and packages (make ensure-node;
// elsewhere it says what is missing and exits 0), and takes the machine's
// real-node lock. The report (markdown) goes to stdout,
// progress to stderr.
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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func main() {
	starts := flag.Int("starts", 3, "node starts (each followed by a stop)")
	pods := flag.Int("pods", 20, "pods per mode, one after the other")
	hold := flag.Int("hold", 5, "sleeping pods while memory is read")
	quick := flag.Bool("quick", false, "smoke run: -starts 1 -pods 3 unless given")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["starts"] {
			*starts = 1
		}
		if !set["pods"] {
			*pods = 3
		}
	}
	if err := kubetest.RealNodeAvailable(); err != nil {
		// Not a failure of `make bench` on a machine without root.
		fmt.Fprintln(os.Stderr, "realnode: skipped:", err)
		return
	}
	if err := run(max(*starts, 1), *pods, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "realnode:", err)
		os.Exit(1)
	}
}

type start struct{ lockWait, ready, images, stop time.Duration }

func run(starts, pods, hold int) error {
	load := loadAvg()
	c, err := kubetest.StartControlPlaneCluster(benchstack.Logf)
	if err != nil {
		return err
	}
	defer func() { _ = c.Stop() }()
	ctx := context.Background()
	kube := c.Clientset()
	if err := kubetest.CreateNodes(ctx, kube, []*corev1.Node{kubetest.MakeNode("kwok-1").Obj()}); err != nil {
		return err
	}

	var ups []start
	var node *kubetest.RealNode
	for i := range starts {
		benchstack.Logf("real node start %d/%d", i+1, starts)
		n, err := kubetest.StartRealNode(c, benchstack.Logf)
		if err != nil {
			return err
		}
		s := start{lockWait: n.LockWait, ready: n.StartupTime, images: n.ImageTime}
		if i < starts-1 {
			t0 := time.Now()
			if err := n.Stop(); err != nil {
				return err
			}
			s.stop = time.Since(t0)
		} else {
			node = n
		}
		ups = append(ups, s)
	}
	var lastStop time.Duration
	defer func() {
		if node != nil {
			_ = node.Stop()
		}
	}()

	ns := "bench"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// Warm-up: the first pod of a node pays for the pause image's first
	// snapshot and the bridge's creation.
	if _, _, err := podLatency(ctx, kube, ns, "warm", onNode); err != nil {
		return err
	}
	// The launcher's grant Secret (the launcher reads it; with nothing to
	// move it never uses it).
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: grantSecret},
		Data: map[string][]byte{launch.GrantKey: []byte("unused")}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, _, err := podLatency(ctx, kube, ns, "warm-launched", launched); err != nil {
		return err
	}
	var real, fake, wrapped, realRunning []time.Duration
	for i := range pods {
		benchstack.Logf("pod %d/%d", i+1, pods)
		done, _, err := podLatency(ctx, kube, ns, fmt.Sprintf("kwok-%d", i), onKwok)
		if err != nil {
			return err
		}
		fake = append(fake, done)
		done, running, err := podLatency(ctx, kube, ns, fmt.Sprintf("real-%d", i), onNode)
		if err != nil {
			return err
		}
		real = append(real, done)
		if running > 0 {
			realRunning = append(realRunning, running)
		}
		done, _, err = podLatency(ctx, kube, ns, fmt.Sprintf("launched-%d", i), launched)
		if err != nil {
			return err
		}
		wrapped = append(wrapped, done)
	}

	benchstack.Logf("%d sleeping pods for the memory figures", hold)
	for i := range hold {
		p := realPod(fmt.Sprintf("hold-%d", i), "sleep", "3600")
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := waitUntil(ctx, func() (bool, error) {
		l, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "hold=true"})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n == hold, nil
	}); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	mem := map[string]int64{}
	for name, pid := range node.PIDs() {
		mem[name] = rssOf(pid)
	}
	shims, shimRSS := processesNamed("containerd-shim-runc-v2")
	t0 := time.Now()
	err = node.Stop()
	lastStop = time.Since(t0)
	node = nil
	if err != nil {
		return err
	}

	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	fmt.Fprintf(w, "## realnode: the tests' real Kubernetes node\n\n")
	fmt.Fprintf(w, "`%s` — %s, %s/%s, %d CPUs, load at start %s, %s\n\n", benchstack.CommandLine("realnode"),
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), load, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "kubelet and kube-proxy %s, containerd %s, Debian's runc and CNI plugins.\n\n", kubetest.KubeVersion, kubetest.ContainerdVersion)
	fmt.Fprintf(w, "### Start-up and stop (binaries built, control plane up)\n\n")
	fmt.Fprintf(w, "| start | containerd + images | lock taken → node Ready | stop (host restored) |\n|---|---|---|---|\n")
	for i, s := range ups {
		stop := s.stop
		if i == len(ups)-1 {
			stop = lastStop
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s |\n", i+1, sec(s.images), sec(s.ready), sec(stop))
	}
	fmt.Fprintf(w, "\n### Pod start, one pod at a time (%d each, interleaved)\n\n", pods)
	fmt.Fprintf(w, "| pod | create → Succeeded p50 | min–max |\n|---|---|---|\n")
	row := func(name string, d []time.Duration) {
		s := sorted(d)
		lo, hi := benchstack.MinMax(d)
		fmt.Fprintf(w, "| %s | %s | %s–%s |\n", name, sec(benchstack.Pct(s, 50)), sec(lo), sec(hi))
	}
	row("real node: `echo` in busybox", real)
	row("real node: the same under the step launcher (init container + launcher)", wrapped)
	row("kwok fake node (baseline): exits at once", fake)
	fmt.Fprintf(w, "\nThe launcher adds %s (p50 against p50) to a pod's start and end.\n",
		sec(benchstack.Pct(sorted(wrapped), 50)-benchstack.Pct(sorted(real), 50)))
	if len(realRunning) > 0 {
		s := sorted(realRunning)
		fmt.Fprintf(w, "\nOn the real node the pod was seen Running %s (p50) after its create (%d of %d pods; the others were already Succeeded at the first look).\n",
			sec(benchstack.Pct(s, 50)), len(realRunning), pods)
	}
	fmt.Fprintf(w, "\n### Memory (RSS, MiB) with %d sleeping pods\n\n| process | RSS |\n|---|---|\n", hold)
	names := make([]string, 0, len(mem))
	for n := range mem {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "| %s | %d |\n", n, mem[n]>>20)
	}
	fmt.Fprintf(w, "| containerd-shim-runc-v2 (%d, total) | %d |\n", shims, shimRSS>>20)
	return nil
}

// realPod runs command in the step image on the real node.
func realPod(name string, command ...string) *corev1.Pod {
	sel, tol := kubetest.RealNodePod()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"hold": strconv.FormatBool(strings.HasPrefix(name, "hold-"))}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, NodeSelector: sel, Tolerations: []corev1.Toleration{tol},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "main", Image: kubetest.StepImage, ImagePullPolicy: corev1.PullNever, Command: command}},
		},
	}
}

// podMode says where and how a measured pod runs.
type podMode int

const (
	onKwok   podMode = iota // kwok's node: exits at once
	onNode                  // the real node: echo
	launched                // the real node: echo under the step launcher
)

// grantSecret holds the launched pods' (unused) grant.
const grantSecret = "bench-grant"

// podLatency creates a pod and returns how long until it was seen
// Succeeded and, on the real node, Running (0 if never seen so).
func podLatency(ctx context.Context, kube kubernetes.Interface, ns, name string, mode podMode) (done, running time.Duration, err error) {
	var p *corev1.Pod
	switch mode {
	case onNode, launched:
		p = realPod(name, "echo", "hello")
		if mode == launched {
			l := framework.Launch{Image: kubetest.LauncherImage, Spec: launch.Spec{Gateway: "http://127.0.0.1:9", ResultPath: framework.OutputsPath}}
			if err := framework.Wrap(&p.Spec, "main", l, grantSecret); err != nil {
				return 0, 0, err
			}
		}
	default:
		p = kubetest.MakePod(name, ns).Obj()
		p.Annotations = kubetest.ExitAnnotations(0, 0, "")
	}
	t0 := time.Now()
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return 0, 0, err
	}
	deadline := t0.Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		got, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, 0, err
		}
		switch got.Status.Phase {
		case corev1.PodRunning:
			if running == 0 {
				running = time.Since(t0)
			}
		case corev1.PodSucceeded:
			return time.Since(t0), running, nil
		case corev1.PodFailed:
			return 0, 0, fmt.Errorf("pod %s failed: %+v", name, got.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, 0, fmt.Errorf("pod %s did not succeed within 2 minutes", name)
}

func sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

func sec(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func waitUntil(ctx context.Context, cond func() (bool, error)) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after 5 min")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// processesNamed counts the processes whose command is name, and their
// total RSS.
func processesNamed(name string) (int, int64) {
	entries, _ := os.ReadDir("/proc")
	n, total := 0, int64(0)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(b) == 0 {
			continue
		}
		arg0, _, _ := strings.Cut(string(b), "\x00")
		if arg0 == name || strings.HasSuffix(arg0, "/"+name) {
			n++
			total += rssOf(pid)
		}
	}
	return n, total
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
