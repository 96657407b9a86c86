package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/internal/stack/devstack"
	"github.com/atelier-ml/atelier/internal/stack/ociimage"
)

// The real node: names and addresses. They are fixed, because there is one
// real node per machine (see RealNode) and a crashed run's leftovers must be
// found by the next one; they are chosen not to clash with kwok's fake
// nodes (node IP 10.240.0.1, pod IPs from 10.244.0.0/16) or the Service
// range (10.96.0.0/16).
const (
	// RealNodeName is the node's name (kubelet --hostname-override).
	RealNodeName = "atelier-node"
	// RealNodeIP is the node's InternalIP, added to lo as a /32 while the
	// node runs (the kernel here has no dummy link type): kubelet serves
	// on it, and the API server reaches kubelet there for logs.
	RealNodeIP = "10.241.0.1"
	// RealNodePodCIDR is the pod network, on the bridge realNodeBridge.
	RealNodePodCIDR = "10.245.0.0/24"
	// RealNodeLabel is the node's label (value "true") and the key of its
	// NoSchedule taint: only pods that select and tolerate it run there,
	// so the other tests' pods stay on kwok's nodes. RealNodePod spells
	// out both. (Not under atelier.dev/: pipelines may not use Atelier's
	// own keys in their pod settings.)
	RealNodeLabel = "kubetest.atelier/real-node"

	// StepImage is a busybox image (sh, echo, cat, env, sleep, ...) built
	// from the host's static busybox, PauseImage the pod sandbox image.
	// Both are imported into the node's containerd at start: there is no
	// registry, so pods use them with imagePullPolicy: Never.
	StepImage  = "localhost/atelier/step:busybox"
	PauseImage = "localhost/atelier/pause:go"
	// LauncherImage holds the step launcher (cmd/atelier-launcher) at
	// /atelier-launcher, as the Atelier image does: the init container of
	// a step with artifacts copies it from there.
	LauncherImage = "localhost/atelier/launcher:dev"
	// ModelServerImage is examples/modelserver (it speaks vLLM's and
	// Triton's HTTP APIs) as an engine image, its entrypoint the server.
	ModelServerImage = "localhost/atelier/modelserver:dev"

	// ContainerdVersion must match tools/kube/containerd/go.mod (a unit
	// test checks); it names the cache directory.
	ContainerdVersion = "v2.2.9"

	// EnvRequireNode, set to 1 (as .ci/run does), makes the tests that need
	// the real node fail when it cannot start, instead of skipping.
	EnvRequireNode = "ATELIER_REQUIRE_NODE"
)

// Host paths and names the real node owns while it runs. Everything it
// changes on the host is under realNodeBase or listed here, so a sweep
// finds a crashed run's state.
const (
	realNodeBase   = "/run/atelier-node"
	realNodeLock   = "/run/atelier-node.lock"
	realNodeBridge = "atelier0"
	// realNodeGateway is the bridge's address, the pods' default gateway.
	realNodeGateway = "10.245.0.1"
	realNodeCgroup  = "atelier-node"
	// Fixed ports (one node per machine): kubelet's API on RealNodeIP,
	// the health and metrics endpoints on loopback.
	kubeletPort        = 10350
	kubeletHealthzPort = 10348
	kubeProxyHealthz   = "127.0.0.1:10356"
	kubeProxyMetrics   = "127.0.0.1:10349"
)

// nodeLockTimeout bounds the wait for another test binary's real node to
// stop; a user holds it for the length of a few tests.
const nodeLockTimeout = 15 * time.Minute

// RealNode is a real Kubernetes node — kubelet v1.35.4, containerd v2.2.9
// with runc, CNI bridge networking and kube-proxy (iptables) — joined to a
// StartControlPlane cluster beside kwok's fake nodes. See Cluster.RealNode.
type RealNode struct {
	// Name, IP and PodCIDR are RealNodeName, RealNodeIP and
	// RealNodePodCIDR.
	Name, IP, PodCIDR string
	// LockWait is how long the start waited for another process's node
	// to stop; StartupTime how long it then took to be Ready (containerd,
	// images, kubelet, kube-proxy), ImageTime the part spent building and
	// importing the images.
	LockWait, StartupTime, ImageTime time.Duration

	c                              *Cluster
	bins                           nodeBinaries
	containerd, kubelet, kubeProxy *process
	unlock                         func()
	log                            func(string, ...any)
	// atelierOnce builds and imports AtelierImage (ImportAtelierImage).
	atelierOnce sync.Once
	atelierErr  error
}

var (
	nodeMu    sync.Mutex
	node      *RealNode
	nodeUsers int
	// nodeErr is a failed start: the binary's later callers get it at once.
	nodeErr error
)

// RealNode returns the real node joined to c, starting it if this test is
// the first in the binary to ask, and releases it when the test ends: the
// node stops, and the host is restored, when the last test using it ends.
// Tests that need it should therefore run one after the other, or as
// subtests of one test, to start it once.
//
// There is one real node per machine: two kube-proxies would fight over
// the same iptables chains, and two kubelets over hard-coded host paths. A
// machine-wide lock (/run/atelier-node.lock) makes another
// test binary that wants one wait until this one's is stopped (at most 15
// minutes, reporting who holds it); a real node is joined to one API
// server, its owner's, so it is not shared across binaries.
//
// Where the node cannot start (not root, not Linux, runc, iptables, the
// CNI plugins or busybox-static missing, or a start that fails), the test
// is skipped with a message saying what is missing, or fails with it when
// ATELIER_REQUIRE_NODE=1. With -short it is skipped.
//
// Pods run there only if they select and tolerate it (RealNodePod) and use
// the images imported at start (StepImage) with imagePullPolicy Never.
func (c *Cluster) RealNode(t testing.TB) *RealNode {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real Kubernetes node; skipped with -short")
	}
	if !c.ControlPlane() {
		t.Fatalf("kubetest: RealNode needs a StartControlPlane cluster (the node needs a scheduler and controllers)")
	}
	nodeMu.Lock()
	defer nodeMu.Unlock()
	if node == nil {
		if nodeErr == nil {
			node, nodeErr = StartRealNode(c, progress)
		}
		if nodeErr != nil {
			NodeUnavailable(t, nodeErr)
		}
	}
	if node.c != c {
		t.Fatalf("kubetest: the real node is joined to another cluster of this binary")
	}
	nodeUsers++
	n := node
	t.Cleanup(func() {
		nodeMu.Lock()
		defer nodeMu.Unlock()
		if nodeUsers--; nodeUsers > 0 {
			return
		}
		node = nil
		if err := n.Stop(); err != nil {
			t.Errorf("kubetest: stopping the real node: %v", err)
		}
	})
	return n
}

// RealNodeAvailable says what this machine lacks to run the real node, as
// far as can be told without starting it (ErrNodeUnavailable), or nil.
func RealNodeAvailable() error {
	if missing := nodePrerequisites(); len(missing) > 0 {
		return fmt.Errorf("%w: missing %s", ErrNodeUnavailable, strings.Join(missing, "; "))
	}
	return nil
}

// NodeUnavailable skips t because the real node cannot start (err says
// why), or fails it with that message under ATELIER_REQUIRE_NODE=1.
func NodeUnavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(EnvRequireNode) == "1" {
		t.Fatalf("kubetest: the real node is required (%s=1) but cannot start: %v", EnvRequireNode, err)
	}
	t.Skipf("kubetest: skipped, the real node cannot start: %v (set %s=1 to fail instead)", err, EnvRequireNode)
}

// ErrNodeUnavailable wraps what is missing on a machine where the real node
// cannot run at all (as opposed to a start that failed).
var ErrNodeUnavailable = errors.New("this machine cannot run the real node")

// StartRealNode starts the real node joined to c (a StartControlPlane
// cluster) for a program that is not a test, such as a benchmark: it
// waits for the machine-wide lock, sweeps what a crashed run left, starts
// containerd, imports the images, starts kubelet and kube-proxy and waits
// until the node is Ready. The caller must Stop it. Tests use
// Cluster.RealNode.
func StartRealNode(c *Cluster, log func(string, ...any)) (n *RealNode, err error) {
	if log == nil {
		log = progress
	}
	if err := RealNodeAvailable(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	bins, err := findNodeBinaries(ctx, log)
	if err != nil {
		return nil, err
	}

	n = &RealNode{Name: RealNodeName, IP: RealNodeIP, PodCIDR: RealNodePodCIDR, c: c, bins: bins, log: log}
	t0 := time.Now()
	lctx, lcancel := context.WithTimeout(context.Background(), nodeLockTimeout)
	defer lcancel()
	n.unlock, err = lockNode(lctx, log)
	if err != nil {
		return nil, err
	}
	n.LockWait = time.Since(t0)
	defer func() {
		if err != nil {
			if serr := n.Stop(); serr != nil {
				err = fmt.Errorf("%w\n(and stopping it: %v)", err, serr)
			}
			n = nil
		}
	}()
	if err := sweepNode(log); err != nil {
		return n, fmt.Errorf("cleaning up after an earlier real node: %w", err)
	}

	t1 := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), startTimeout)
	defer scancel()
	if err := n.start(sctx); err != nil {
		return n, err
	}
	n.StartupTime = time.Since(t1)
	log("real node %s Ready in %s (images %s; kubelet %s, containerd %s, runc %s); logs in %s",
		n.Name, n.StartupTime.Round(10*time.Millisecond), n.ImageTime.Round(10*time.Millisecond), KubeVersion, ContainerdVersion, runcVersion(), c.dir)
	return n, nil
}

// RealNodePod returns the pod settings that put a pod on the real node:
// its node selector and a toleration of its taint.
func RealNodePod() (nodeSelector map[string]string, toleration corev1.Toleration) {
	return map[string]string{RealNodeLabel: "true"},
		corev1.Toleration{Key: RealNodeLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
}

// start brings the node up on a clean host (the lock is held and the sweep
// has run).
func (n *RealNode) start(ctx context.Context) error {
	c := n.c
	// First of all, what we are about to change, so that a crash at any
	// later point is undone by the next sweep.
	if err := saveHostState(); err != nil {
		return err
	}
	d := nodeDirs()
	for _, p := range []string{d.containerdRoot, d.containerdState, d.runc, d.cniConf, d.cniData, d.kubelet, d.podLogs, d.images} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return err
		}
	}
	files := map[string]string{
		d.containerdConfig: containerdConfig(d),
		d.cniConflist:      cniConfig(d),
		d.kubeletConfig:    kubeletConfig(d),
		d.kubeProxyConfig:  kubeProxyConfig(c.kubeconfig),
	}
	for p, content := range files {
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return err
		}
	}

	// The images build while containerd starts.
	type built struct {
		tars []string
		err  error
	}
	images := make(chan built, 1)
	ti := time.Now()
	go func() {
		tars, err := buildNodeImages(ctx, d.images)
		images <- built{tars, err}
	}()

	var err error
	// The shim is looked up on PATH, next to containerd.
	env := []string{"PATH=" + filepath.Dir(n.bins.containerd) + string(os.PathListSeparator) + os.Getenv("PATH")}
	n.containerd, err = startProcessEnv(n.bins.containerd, filepath.Join(c.dir, "containerd.log"), env, "--config", d.containerdConfig)
	if err != nil {
		return err
	}
	if err := n.containerd.waitFor(ctx, func() bool { return n.ctr(ctx, "version") == nil }); err != nil {
		return fmt.Errorf("containerd: %w\n%s", err, n.containerd.logTail())
	}
	b := <-images
	if b.err != nil {
		return b.err
	}
	for _, tar := range b.tars {
		if err := n.ctr(ctx, "images", "import", "--no-unpack=false", tar); err != nil {
			return fmt.Errorf("import %s: %w\n%s", filepath.Base(tar), err, n.containerd.logTail())
		}
	}
	n.ImageTime = time.Since(ti)

	if err := prepareHost(); err != nil {
		return err
	}
	n.kubelet, err = startProcess(n.bins.kubelet, filepath.Join(c.dir, "kubelet.log"),
		"--config="+d.kubeletConfig,
		"--kubeconfig="+c.kubeconfig,
		"--root-dir="+d.kubelet,
		"--cert-dir="+filepath.Join(d.kubelet, "pki"),
		"--hostname-override="+RealNodeName,
		"--node-ip="+RealNodeIP,
		"--node-labels="+RealNodeLabel+"=true",
		"--v=1",
	)
	if err != nil {
		return err
	}
	n.kubeProxy, err = startProcess(n.bins.kubeProxy, filepath.Join(c.dir, "kube-proxy.log"),
		"--config="+d.kubeProxyConfig, "--v=1")
	if err != nil {
		return err
	}

	err = n.kubelet.waitFor(ctx, func() bool {
		nd, err := c.client.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("kubelet: node %s not Ready: %w\n%s", RealNodeName, err, n.kubelet.logTail())
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	err = n.kubeProxy.waitFor(ctx, func() bool {
		resp, err := hc.Get("http://" + kubeProxyHealthz + "/healthz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		return fmt.Errorf("kube-proxy: %w\n%s", err, n.kubeProxy.logTail())
	}
	return nil
}

// ctr runs ctr against the node's containerd, in Kubernetes' namespace.
func (n *RealNode) ctr(ctx context.Context, args ...string) error {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, n.bins.ctr, append([]string{"--address", nodeDirs().containerdSock, "--namespace", "k8s.io"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// Stop stops kube-proxy, kubelet and containerd, deletes the Node object,
// then restores the host (the same sweep that cleans up after a crashed
// run: pod processes, mounts, iptables chains, the bridge, the node IP,
// cgroups, sysctls, host paths) and releases the machine-wide lock.
// Cluster.RealNode calls it when its last test ends.
func (n *RealNode) Stop() error {
	var errs []error
	for _, p := range []*process{n.kubeProxy, n.kubelet} {
		if p != nil {
			errs = append(errs, p.stop(10*time.Second))
		}
	}
	if n.kubelet != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.c.client.CoreV1().Nodes().Delete(ctx, RealNodeName, metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete node %s: %w", RealNodeName, err))
		}
	}
	if n.containerd != nil {
		errs = append(errs, n.containerd.stop(10*time.Second))
	}
	if n.unlock != nil {
		errs = append(errs, sweepNode(n.log))
		n.unlock()
		n.unlock = nil
	}
	return errors.Join(errs...)
}

// PIDs returns the node's process ids by name ("kubelet", "containerd",
// "kube-proxy"), for benchmarks that read their memory.
func (n *RealNode) PIDs() map[string]int {
	out := map[string]int{}
	for _, p := range []*process{n.containerd, n.kubelet, n.kubeProxy} {
		if p != nil && p.cmd.Process != nil {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}

// nodeBinaries are the executables of the real node.
type nodeBinaries struct {
	kubelet, kubeProxy, containerd, shim, ctr string
}

func (b nodeBinaries) paths() []string {
	return []string{b.kubelet, b.kubeProxy, b.containerd, b.shim, b.ctr}
}

// nodeBinariesIn lays the binaries out as build.sh does (or all in dir).
func nodeBinariesIn(dir, cache string) nodeBinaries {
	kube, ctrd := dir, dir
	if dir == "" {
		kube, ctrd = filepath.Join(cache, "kube-"+KubeVersion), filepath.Join(cache, "containerd-"+ContainerdVersion)
	}
	return nodeBinaries{
		kubelet: filepath.Join(kube, "kubelet"), kubeProxy: filepath.Join(kube, "kube-proxy"),
		containerd: filepath.Join(ctrd, "containerd"), shim: filepath.Join(ctrd, "containerd-shim-runc-v2"), ctr: filepath.Join(ctrd, "ctr"),
	}
}

// findNodeBinaries is findBinaries for the node: $ATELIER_KUBE_BIN_DIR,
// else the cache, else `tools/kube/build.sh node` under the same lock.
func findNodeBinaries(ctx context.Context, log func(string, ...any)) (nodeBinaries, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		b := nodeBinariesIn(d, "")
		if err := checkBinaries(b.paths()); err != nil {
			return nodeBinaries{}, fmt.Errorf("%s=%s: %w", EnvBinDir, d, err)
		}
		return b, nil
	}
	cache, err := devstack.CacheDir()
	if err != nil {
		return nodeBinaries{}, err
	}
	b := nodeBinariesIn("", cache)
	if checkBinaries(b.paths()) == nil {
		return b, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nodeBinaries{}, err
	}
	lock := filepath.Join(cache, "kube-"+KubeVersion+".lock")
	unlock, err := devstack.LockFile(ctx, lock, func(waited time.Duration) {
		log("waiting for another process to finish building the Kubernetes binaries (%s)…", waited.Round(time.Second))
	})
	if err != nil {
		return nodeBinaries{}, fmt.Errorf("lock %s: %w", lock, err)
	}
	defer unlock()
	if checkBinaries(b.paths()) == nil {
		return b, nil
	}
	root, err := repoRoot()
	if err != nil {
		return nodeBinaries{}, err
	}
	script := filepath.Join(root, "tools", "kube", "build.sh")
	cmd := exec.CommandContext(ctx, "bash", script, "node")
	cmd.Env = append(os.Environ(), EnvCacheDir+"="+cache)
	cmd.Stdout = io.Discard
	cmd.Stderr = os.Stderr
	procAttrs(cmd)
	cmd.Cancel = func() error { return kill(cmd.Process) }
	cmd.WaitDelay = 5 * time.Second
	log("real node binaries missing under %s; running %s node (run `make ensure-node` beforehand to build them outside go test's timeout)", cache, script)
	if err := cmd.Run(); err != nil {
		return nodeBinaries{}, fmt.Errorf("%s node: %w (see its output above)", script, err)
	}
	if err := checkBinaries(b.paths()); err != nil {
		return nodeBinaries{}, fmt.Errorf("%s node finished but %w", script, err)
	}
	return b, nil
}

// buildNodeImages builds the pause program and the node's images into dir,
// returning the archives to import.
func buildNodeImages(ctx context.Context, dir string) ([]string, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	// Static programs: the sandbox's pause, and the step launcher.
	static := func(pkg, out string) error {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w: %s", pkg, err, out)
		}
		return nil
	}
	pause, launcher, modelserver := filepath.Join(dir, "pause"), filepath.Join(dir, "atelier-launcher"), filepath.Join(dir, "modelserver")
	if err := static("./internal/stack/ociimage/pause", pause); err != nil {
		return nil, err
	}
	if err := static("./cmd/atelier-launcher", launcher); err != nil {
		return nil, err
	}
	if err := static("./examples/modelserver/cmd/modelserver", modelserver); err != nil {
		return nil, err
	}
	pauseImg, err := ociimage.Static(PauseImage, pause, "/pause")
	if err != nil {
		return nil, err
	}
	launcherImg, err := ociimage.Static(LauncherImage, launcher, "/atelier-launcher")
	if err != nil {
		return nil, err
	}
	modelserverImg, err := ociimage.Static(ModelServerImage, modelserver, "/modelserver")
	if err != nil {
		return nil, err
	}
	busybox, err := lookBusybox()
	if err != nil {
		return nil, err
	}
	stepImg, err := ociimage.Busybox(StepImage, busybox)
	if err != nil {
		return nil, err
	}
	var tars []string
	for name, img := range map[string]ociimage.Image{"pause.tar": pauseImg, "step.tar": stepImg, "launcher.tar": launcherImg, "modelserver.tar": modelserverImg} {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		_, werr := img.Write(f)
		if err := errors.Join(werr, f.Close()); err != nil {
			return nil, fmt.Errorf("write image %s: %w", img.Ref, err)
		}
		tars = append(tars, p)
	}
	return tars, nil
}

// lookBusybox finds a static busybox (Debian's busybox-static puts it in
// /bin).
func lookBusybox() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("busybox")
}

// runcVersion is runc's version line, for the start-up log.
func runcVersion() string {
	out, err := exec.Command("runc", "--version").Output()
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(out))
	if len(f) >= 3 {
		return f[2]
	}
	return "?"
}
