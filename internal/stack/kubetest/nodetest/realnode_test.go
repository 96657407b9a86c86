package nodetest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) == "1" {
		crashChild()
		return
	}
	kubetest.Main(m)
}

// pod returns a pod for the real node running command in the step image.
func pod(name string, command ...string) *corev1.Pod {
	sel, tol := kubetest.RealNodePod()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			NodeSelector:                  sel,
			Tolerations:                   []corev1.Toleration{tol},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "main", Image: kubetest.StepImage, ImagePullPolicy: corev1.PullNever,
				Command: command,
				Env:     []corev1.EnvVar{{Name: "GREETING", Value: "hello from the real node"}},
			}},
		},
	}
}

// waitPod polls the pod until done says so.
func waitPod(t *testing.T, kube kubernetes.Interface, ns, name string, timeout time.Duration, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && done(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: %s: not within %s (last: %+v, %v)", name, what, timeout, p.Status, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func terminated(p *corev1.Pod) *corev1.ContainerStateTerminated {
	if len(p.Status.ContainerStatuses) == 0 {
		return nil
	}
	return p.Status.ContainerStatuses[0].State.Terminated
}

// checkHostRestored registers, before the node starts, a check that runs
// after it has stopped: nothing of it is left and the sysctls it changes
// are back.
func checkHostRestored(t *testing.T) {
	before := kubetest.WatchedSysctls()
	if traces := kubetest.RealNodeTraces(); len(traces) > 0 {
		t.Logf("before the start, a real node had left: %s (the start sweeps it)", strings.Join(traces, "; "))
	}
	t.Cleanup(func() {
		if traces := kubetest.RealNodeTraces(); len(traces) > 0 {
			t.Errorf("the real node left on the host: %s", strings.Join(traces, "; "))
		}
		after := kubetest.WatchedSysctls()
		for k, v := range before {
			if after[k] != v {
				t.Errorf("sysctl %s is %s after the node, was %s", k, after[k], v)
			}
		}
	})
}

// The real node runs real containers: a pod's command and environment,
// its termination message and exit code, its log read back through the
// API server, a Service's ClusterIP reached through kube-proxy's rules,
// and the kubelet's reason for an image that is not there. The host is as
// before once it stops.
func TestRealNode(t *testing.T) {
	c := kubetest.StartControlPlane(t)
	checkHostRestored(t)
	start := time.Now()
	n := c.RealNode(t)
	t.Logf("real node Ready after %s (lock wait %s, start %s, images %s)", time.Since(start).Round(time.Millisecond),
		n.LockWait.Round(time.Millisecond), n.StartupTime.Round(time.Millisecond), n.ImageTime.Round(time.Millisecond))
	kube := c.Clientset()
	ns := c.Namespace(t)
	ctx := context.Background()

	t.Run("command, env, termination message, log", func(t *testing.T) {
		// The shell, not Kubernetes, expands $GREETING: Kubernetes expands
		// only $(NAME) in a command.
		p := pod("echo", "sh", "-c", `echo "$GREETING"; printf '{"greeting": "%s", "cwd": "%s"}' "$GREETING" "$(pwd)" > /dev/termination-log`)
		p.Spec.Containers[0].WorkingDir = "/tmp"
		created := time.Now()
		_, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := waitPod(t, kube, ns, "echo", 2*time.Minute, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		t.Logf("pod Succeeded %s after its creation", time.Since(created).Round(time.Millisecond))
		if got.Spec.NodeName != kubetest.RealNodeName {
			t.Errorf("ran on %q", got.Spec.NodeName)
		}
		if term := terminated(got); term == nil || term.Message != `{"greeting": "hello from the real node", "cwd": "/tmp"}` || term.ExitCode != 0 {
			t.Errorf("terminated state %+v: want the message the container wrote", term)
		}
		if ip := got.Status.PodIP; !strings.HasPrefix(ip, "10.245.0.") {
			t.Errorf("pod IP %q is not from the node's pod CIDR", ip)
		}
		logs, err := kube.CoreV1().Pods(ns).GetLogs("echo", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs through the API server: %v", err)
		}
		if string(logs) != "hello from the real node\n" {
			t.Errorf("log %q", logs)
		}
	})

	t.Run("exit code", func(t *testing.T) {
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod("fail", "sh", "-c", "exit 3"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitPod(t, kube, ns, "fail", 2*time.Minute, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if term := terminated(got); term == nil || term.ExitCode != 3 || term.Reason != "Error" {
			t.Errorf("terminated state %+v, want exit code 3, reason Error", term)
		}
	})

	t.Run("image not present", func(t *testing.T) {
		p := pod("noimage", "true")
		p.Spec.Containers[0].Image = "localhost/atelier/absent:1"
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitPod(t, kube, ns, "noimage", time.Minute, "waiting with ErrImageNeverPull", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "ErrImageNeverPull"
		})
		t.Logf("waiting: %s", got.Status.ContainerStatuses[0].State.Waiting.Message)
	})

	t.Run("service", func(t *testing.T) {
		// A server pod behind a ClusterIP Service, and a client pod that
		// reaches it through kube-proxy's rules.
		srv := pod("server", "sh", "-c", `trap 'exit 0' TERM; while true; do echo pong | nc -l -p 8080; done & wait`)
		srv.Labels = map[string]string{"app": "server"}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, srv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "server"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "server"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitPod(t, kube, ns, "server", 2*time.Minute, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		client := pod("client", "sh", "-c", fmt.Sprintf(`for i in $(seq 1 30); do out=$(nc -w 2 %s 80 </dev/null) && [ "$out" = pong ] && echo "$out" && exit 0; sleep 0.5; done; exit 1`, svc.Spec.ClusterIP))
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitPod(t, kube, ns, "client", 2*time.Minute, "finished", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		if got.Status.Phase != corev1.PodSucceeded {
			logs, _ := kube.CoreV1().Pods(ns).GetLogs("client", &corev1.PodLogOptions{}).DoRaw(ctx)
			t.Errorf("the client pod could not reach %s:80: %s", svc.Spec.ClusterIP, logs)
		}
	})
}

const crashChildEnv = "NODETEST_CRASH_CHILD"

// A test binary killed with SIGKILL while its real node runs a pod (go
// test -timeout does the same) leaves the pod's processes, its shim, mounts,
// chains and sysctls behind: the next start sweeps them all. The child is
// this test binary run again (crashChild); the sweep is SweepRealNode, the
// same the next start (and `make clean-node`) runs.
func TestCrashedNodeIsSweptAtTheNextStart(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real node")
	}
	kubetest.StartControlPlane(t) // skips like the node would, and builds what the child needs
	if err := kubetest.RealNodeAvailable(); err != nil {
		kubetest.NodeUnavailable(t, err)
	}
	before := kubetest.WatchedSysctls()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "READY") || strings.HasPrefix(l, "FAILED") {
				ready <- l
			}
		}
		close(ready)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-ready:
		if !ok || !strings.HasPrefix(l, "READY") {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the child did not get a pod running on its real node: %q", l)
		}
	case <-time.After(20 * time.Minute): // another test binary may hold the machine's node for a while
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("the child's real node did not come up")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	left := kubetest.RealNodeTraces()
	t.Logf("left by the killed test binary: %s", strings.Join(left, "; "))
	for _, want := range []string{"containerd-shim-runc-v2", "iptables-save chain KUBE-", "link atelier0", "mount "} {
		if !strings.Contains(strings.Join(left, "\n"), want) {
			t.Errorf("expected the crash to leave %q (else this test proves nothing)", want)
		}
	}
	if err := kubetest.SweepRealNode(time.Minute, t.Logf); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if traces := kubetest.RealNodeTraces(); len(traces) > 0 {
		t.Errorf("left after the sweep: %s", strings.Join(traces, "; "))
	}
	after := kubetest.WatchedSysctls()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("sysctl %s is %s after the sweep, was %s", k, after[k], v)
		}
	}
}

// crashChild starts a control plane and the real node, runs a pod that
// sleeps, says READY and waits to be killed.
func crashChild() {
	fail := func(err error) {
		fmt.Printf("FAILED %v\n", err)
		os.Exit(1)
	}
	c, err := kubetest.StartControlPlaneCluster(func(f string, a ...any) { fmt.Fprintf(os.Stderr, "child: "+f+"\n", a...) })
	if err != nil {
		fail(err)
	}
	n, err := kubetest.StartRealNode(c, func(f string, a ...any) { fmt.Fprintf(os.Stderr, "child: "+f+"\n", a...) })
	if err != nil {
		fail(err)
	}
	_ = n
	kube := c.Clientset()
	ctx := context.Background()
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod("sleeper", "sleep", "600"), metav1.CreateOptions{}); err != nil {
		fail(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		p, err := kube.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			fmt.Println("READY")
			select {}
		}
		time.Sleep(100 * time.Millisecond)
	}
	fail(fmt.Errorf("the pod never ran"))
}
