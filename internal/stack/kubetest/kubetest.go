package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeVersion is the kube-apiserver release the tests run. It must match
// k8s.io/kubernetes in tools/kube/go.mod (a unit test checks): it names the
// cache directory the binaries are looked up in.
const KubeVersion = "v1.35.4"

// KwokVersion and KubeRayOperatorVersion are the kwok and KubeRay operator
// releases a control-plane cluster runs; they must match tools/kube/kwok/go.mod
// and tools/kube/kuberay/go.mod (a unit test checks) and name their cache
// directories.
const (
	KwokVersion            = "v0.7.0"
	KubeRayOperatorVersion = "v1.6.0"
)

// EnvBinDir names the environment variable that points at a directory holding
// prebuilt kube-apiserver and etcd binaries, skipping the cache and the build
// (e.g. a CI image that ships them).
const EnvBinDir = "ATELIER_KUBE_BIN_DIR"

// EnvCacheDir overrides the directory where built tools are cached, as for
// the rest of Atelier (default ~/.cache/atelier).
const EnvCacheDir = "ATELIER_CACHE_DIR"

// startTimeout bounds everything after the binaries exist: etcd, the API
// server, the CRDs. Startup takes a few seconds; the margin is for a loaded
// 2-core machine running several test binaries at once.
const startTimeout = 2 * time.Minute

// buildTimeout bounds a first-time build of the binaries (6-11 min on 2 cores).
const buildTimeout = 40 * time.Minute

// user is the identity of the static bearer token; system:masters makes it a
// cluster admin under any authorizer.
const (
	user  = "kubetest-admin"
	group = "system:masters"
)

var (
	once    sync.Once
	cluster *Cluster
	initErr error
	// mode is what the first Start* call of the binary asked for.
	mode string
)

const (
	modeAPIServer    = "Start (kube-apiserver only)"
	modeControlPlane = "StartControlPlane"
)

// Main runs the tests and then stops the shared cluster, if one was started.
// Call it from TestMain; it does not return.
func Main(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "kubetest:", err)
		}
	}
	os.Exit(code)
}

// Start returns the test binary's shared cluster, starting it on first use.
// A failed start fails every test that asks, with the server logs' tails in
// the message. With -short it skips the calling test instead.
//
// The cluster is a bare API server: no controller acts on anything, which is
// what tests that play a controller step by step need. See
// StartControlPlane for a cluster whose controllers run.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return startShared(t, modeAPIServer)
}

// StartControlPlane is Start for a cluster with a control plane: besides
// etcd and kube-apiserver it runs kube-controller-manager, kube-scheduler,
// kwok (fake nodes and pod lifecycles) and the KubeRay operator, with the
// fake Ray dashboard (see the package doc). The cluster starts with no
// nodes: tests add them (MakeNode, CreateNodes), so pods stay Pending until
// some node fits them, as on a real cluster.
//
// A test binary runs one kind of cluster: mixing Start and
// StartControlPlane in one binary fails the second kind's tests.
func StartControlPlane(t testing.TB) *Cluster {
	t.Helper()
	return startShared(t, modeControlPlane)
}

func startShared(t testing.TB, want string) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs kube-apiserver and etcd; skipped with -short")
	}
	once.Do(func() {
		mode = want
		cluster, initErr = start(progress, want == modeControlPlane)
	})
	if initErr != nil {
		t.Fatalf("kubetest: %v", initErr)
	}
	if mode != want {
		t.Fatalf("kubetest: this test binary already started its shared cluster with %s; %s cannot share it (put the tests in separate packages)", mode, want)
	}
	return cluster
}

// progress goes to stderr directly: t.Logf output is held back until the
// test ends, and a silent multi-minute build looks like a hang.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kubetest: "+format+"\n", args...)
}

// Cluster is a running kube-apiserver backed by its own etcd, with the KubeRay
// and Spark-operator CRDs established. It is shared by the tests of a binary;
// do not Stop it from a test.
type Cluster struct {
	dir        string // temp dir: etcd data, certs, keys, logs, kubeconfig
	host       string // https://127.0.0.1:<port>
	etcdURL    string // http://127.0.0.1:<port>
	config     *rest.Config
	kubeconfig string
	client     *kubernetes.Clientset

	etcd, apiserver *process
	// The control plane (nil for a bare API server).
	controllerManager, scheduler, kwok, rayOperator *process
	dashboard                                       *Dashboard

	// StartupTime is how long etcd + kube-apiserver took to become ready,
	// CRDTime how long installing and establishing the CRDs took after that,
	// and ControlPlaneTime how long the controllers, scheduler, kwok and
	// KubeRay then took to report healthy (binaries already built).
	StartupTime, CRDTime, ControlPlaneTime time.Duration
}

// ControlPlane reports whether controllers, scheduler, kwok and KubeRay run.
func (c *Cluster) ControlPlane() bool { return c.controllerManager != nil }

// Dashboard returns the fake Ray dashboard (nil without a control plane).
func (c *Cluster) Dashboard() *Dashboard { return c.dashboard }

// PIDs returns the process id of each running component, by name
// ("kube-apiserver", "etcd", "kube-controller-manager", ...), for
// benchmarks that read their memory.
func (c *Cluster) PIDs() map[string]int {
	out := map[string]int{}
	for _, p := range []*process{c.etcd, c.apiserver, c.controllerManager, c.scheduler, c.kwok, c.rayOperator} {
		if p != nil && p.cmd.Process != nil {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}

// Dir returns the cluster's temp dir, which holds every component's log
// (<component>.log), for a test that wants to point at them.
func (c *Cluster) Dir() string { return c.dir }

// RESTConfig returns a fresh copy of an admin client configuration (static
// bearer token in group system:masters, TLS verified against the server's
// self-signed CA). Client-side rate limiting is effectively off, since the
// default 5 QPS would make tests slow and this server is theirs alone.
func (c *Cluster) RESTConfig() *rest.Config {
	return rest.CopyConfig(c.config)
}

// Kubeconfig returns the path of a kubeconfig file for the same identity as
// RESTConfig, for code (or kubectl) that takes a kubeconfig path.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// Host returns the server's URL, https://127.0.0.1:<port>.
func (c *Cluster) Host() string { return c.host }

// Clientset returns a core Kubernetes clientset for RESTConfig.
func (c *Cluster) Clientset() kubernetes.Interface { return c.client }

// nsUnsafe matches runs of characters not allowed in a namespace name.
var nsUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

// namespacePrefix turns a test name into the start of a valid namespace name
// (a DNS-1123 label), so a leftover namespace says which test made it.
func namespacePrefix(testName string) string {
	p := strings.Trim(nsUnsafe.ReplaceAllString(strings.ToLower(testName), "-"), "-")
	// 63 is the label limit; generateName appends 5 random characters.
	if max := 63 - 5 - len("t--"); len(p) > max {
		p = strings.TrimRight(p[:max], "-")
	}
	return "t-" + p + "-"
}

// Namespace creates a namespace unique to this test and deletes it when the
// test ends. Without a namespace controller the deletion only marks it
// Terminating; new objects can no longer be created in it, which is enough.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("kubetest: delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// Stop stops kube-apiserver, then etcd, and removes the cluster's temp dir.
// Main calls it; tests must not.
func (c *Cluster) Stop() error {
	return errors.Join(c.stopProcesses(), os.RemoveAll(c.dir))
}

func (c *Cluster) stopProcesses() error {
	var errs []error
	// Clients of the API server first, so they do not log its shutdown.
	for _, p := range []*process{c.rayOperator, c.kwok, c.scheduler, c.controllerManager} {
		if p != nil {
			errs = append(errs, p.stop(10*time.Second))
		}
	}
	if c.dashboard != nil {
		errs = append(errs, c.dashboard.close())
	}
	// API server first, so it does not spend its shutdown retrying a dead
	// etcd.
	if c.apiserver != nil {
		errs = append(errs, c.apiserver.stop(10*time.Second))
	}
	if c.etcd != nil {
		errs = append(errs, c.etcd.stop(10*time.Second))
	}
	return errors.Join(errs...)
}

// start brings up etcd and kube-apiserver on free loopback ports, then
// installs the CRDs. On failure it stops whatever it started and keeps the
// temp dir (its logs) for diagnosis.
func start(log func(string, ...any), controlPlane bool) (c *Cluster, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	bin, err := findBinaries(ctx, controlPlane, log)
	if err != nil {
		return nil, err
	}
	manifests, err := crdManifests(ctx, controlPlane)
	if err != nil {
		return nil, err
	}

	ctx, cancel = context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	removeStaleDirs()
	dir, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	c = &Cluster{dir: dir}
	defer func() {
		if err != nil {
			// Keep dir: its logs are what explains the failure.
			_ = c.stopProcesses()
			err = fmt.Errorf("%w\n(logs kept in %s until the next kubetest start)", err, dir)
			c = nil
		}
	}()

	t0 := time.Now()
	if err := c.startEtcd(ctx, bin.Etcd); err != nil {
		return c, err
	}
	if err := c.startAPIServer(ctx, bin.APIServer); err != nil {
		return c, err
	}
	c.StartupTime = time.Since(t0)

	t1 := time.Now()
	if err := installCRDs(ctx, c.config, manifests); err != nil {
		return c, fmt.Errorf("%w\n%s", err, c.apiserver.logTail())
	}
	c.CRDTime = time.Since(t1)
	log("kube-apiserver %s ready at %s in %s, %d CRDs established in %s",
		KubeVersion, c.host, c.StartupTime.Round(10*time.Millisecond), len(manifests), c.CRDTime.Round(10*time.Millisecond))
	if !controlPlane {
		return c, nil
	}
	t2 := time.Now()
	if err := c.startControlPlane(ctx, bin); err != nil {
		return c, err
	}
	c.ControlPlaneTime = time.Since(t2)
	log("control plane (controller-manager, scheduler, kwok %s, KubeRay %s) ready in %s; logs in %s",
		KwokVersion, KubeRayOperatorVersion, c.ControlPlaneTime.Round(10*time.Millisecond), c.dir)
	return c, nil
}

// A cluster's temp dir is named tempPrefix+random and holds ownerFile with
// the test binary's pid.
const (
	tempPrefix = "kubetest-"
	ownerFile  = "owner.pid"
)

// removeStaleDirs deletes the temp dirs of earlier test binaries that died
// without running Main's Stop (SIGKILL, -timeout): etcd preallocates its
// WAL, so each one holds over 100 MB. Only dirs with an ownerFile naming a
// process that no longer exists are touched.
func removeStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || processExists(pid) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

func (c *Cluster) startEtcd(ctx context.Context, etcdBin string) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	c.etcd, err = startProcess(etcdBin, filepath.Join(c.dir, "etcd.log"),
		"--name=kubetest",
		"--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=kubetest="+peer,
		// Throwaway data: durability only costs time on every write.
		"--unsafe-no-fsync",
		// CRDs with full pod-template schemas are ~1 MB each; keep well
		// clear of the 1.5 MiB default request limit.
		"--max-request-bytes=10485760",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	// kube-apiserver would retry etcd by itself, but waiting here turns an
	// etcd failure into an etcd error message rather than an apiserver
	// timeout.
	hc := &http.Client{Timeout: 2 * time.Second}
	err = c.etcd.waitFor(ctx, func() bool {
		resp, err := hc.Get(client + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"health":"true"`)
	})
	if err != nil {
		return fmt.Errorf("etcd: %w\n%s", err, c.etcd.logTail())
	}
	c.etcdURL = client
	return nil
}

func (c *Cluster) startAPIServer(ctx context.Context, apiserverBin string) error {
	token, err := randomToken()
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(c.dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(fmt.Sprintf("%s,%s,%s,%q\n", token, user, user, group)), 0o600); err != nil {
		return err
	}
	saKey := filepath.Join(c.dir, "sa.key")
	if err := writeRSAKey(saKey); err != nil {
		return err
	}
	certDir := filepath.Join(c.dir, "certs")
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	c.host = "https://127.0.0.1:" + strconv.Itoa(ports[0])

	c.apiserver, err = startProcess(apiserverBin, filepath.Join(c.dir, "kube-apiserver.log"),
		"--etcd-servers="+c.etcdURL,
		"--bind-address=127.0.0.1",
		// The advertise address otherwise defaults to the first non-loopback
		// interface, and startup fails on a machine without one.
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		// Self-signed serving cert + CA are generated here; RESTConfig
		// trusts that CA.
		"--cert-dir="+certDir,
		"--token-auth-file="+tokenFile,
		// Only the token's holder gets in; AlwaysAllow then spares the
		// RBAC bootstrap, which nothing here needs.
		"--anonymous-auth=false",
		"--authorization-mode=AlwaysAllow",
		"--service-account-key-file="+saKey,
		"--service-account-signing-key-file="+saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		// Room for every Service tests create (KubeRay makes one per
		// RayCluster); pod IPs (kwok) are elsewhere.
		"--service-cluster-ip-range=10.96.0.0/16",
		// Without kube-controller-manager no namespace gets a "default"
		// ServiceAccount, so this admission plugin would reject every Pod
		// a test creates directly. With it, a pod created in a namespace
		// the ServiceAccount controller has not reached yet would be
		// rejected and its controller would retry after a backoff; nothing
		// here mounts tokens, so the plugin stays off in both modes.
		"--disable-admission-plugins=ServiceAccount",
		// Nothing would consume the kubernetes Service's endpoints, and
		// the reconciler rejects a loopback address with log spam.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		// Logs, exec and port-forward go to a node's InternalIP: the real
		// node's name (RealNodeName) resolves nowhere.
		"--kubelet-preferred-address-types=InternalIP",
	)
	if err != nil {
		return err
	}

	// Readiness needs the bearer token (anonymous may be denied) and skips
	// verification because the cert does not exist until the server made it.
	hc := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // readiness probe only
		},
	}
	defer hc.CloseIdleConnections()
	err = c.apiserver.waitFor(ctx, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w\n%s", err, c.apiserver.logTail())
	}

	// apiserver.crt holds the serving cert followed by the CA that signed it.
	ca, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
	if err != nil {
		return fmt.Errorf("kube-apiserver serving cert: %w", err)
	}
	c.config = &rest.Config{
		Host:            c.host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		QPS:             1000,
		Burst:           2000,
	}
	if c.client, err = kubernetes.NewForConfig(c.config); err != nil {
		return err
	}
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	return writeKubeconfig(c.kubeconfig, c.host, ca, token)
}

func writeKubeconfig(path, host string, ca []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path)
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// writeRSAKey writes a fresh service-account signing key. The API server
// derives the verification key from the same private key file.
func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return os.WriteFile(path, b, 0o600)
}

// freePorts asks the kernel for n distinct free loopback ports. Another
// process could take one before the server binds it; on a test machine that
// is rare enough not to be worth retrying.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are chosen, so they are distinct
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// process is a started server with its log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, valid after done
}

// startProcess starts bin in its own process group with a parent-death
// signal, logging to logPath.
//
// The parent-death signal is tied to the OS thread that forked the child, and
// the Go runtime retires a thread when a goroutine locked to it exits. So the
// child is started from a goroutine that locks its thread and then waits for
// the child on it: the thread lives exactly as long as the child does, and a
// test binary killed by -timeout (or SIGKILL) takes its servers with it.
func startProcess(bin, logPath string, args ...string) (*process, error) {
	return startProcessEnv(bin, logPath, nil, args...)
}

// startProcessEnv is startProcess with env added to the test binary's
// environment.
func startProcessEnv(bin, logPath string, env []string, args ...string) (*process, error) {
	logF, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &process{name: filepath.Base(bin), logPath: logPath, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout = logF
	p.cmd.Stderr = logF
	procAttrs(p.cmd)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer logF.Close()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	return p, nil
}

// waitFor polls ready until it reports true, the process exits, or ctx ends.
func (p *process) waitFor(ctx context.Context, ready func() bool) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready() {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during startup: %v", p.name, p.err)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", p.name, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop asks the process group to terminate, and kills it after grace.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = terminate(p.cmd.Process)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = kill(p.cmd.Process)
	<-p.done
	return fmt.Errorf("%s did not stop within %s; killed", p.name, grace)
}

// logTail returns the end of the process's log for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no %s log: %v)", p.name, err)
	}
	return fmt.Sprintf("last lines of %s:\n%s", p.logPath, lastLines(string(b), 40))
}

// lastLines returns at most n trailing lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
