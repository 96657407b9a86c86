package kubetest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"
)

// controllers are the kube-controller-manager controllers a control-plane
// cluster runs: workloads (Deployments, ReplicaSets, Jobs, CronJobs,
// StatefulSets, DaemonSets), HPA, GC, namespace deletion, service accounts,
// endpoints, node lifecycle and the taint manager. Left out: cloud, volume,
// certificate and IPAM controllers, which have nothing to act on here and
// cost startup time.
var controllers = []string{
	"deployment-controller", "replicaset-controller", "replicationcontroller-controller",
	"job-controller", "cronjob-controller", "statefulset-controller", "daemonset-controller",
	"horizontal-pod-autoscaler-controller", "disruption-controller",
	"garbage-collector-controller", "namespace-controller", "pod-garbage-collector-controller",
	"ttl-after-finished-controller", "resourcequota-controller",
	"serviceaccount-controller", "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
	"endpoints-controller", "endpointslice-controller",
	"node-lifecycle-controller", "taint-eviction-controller",
}

// schedulerConfig lifts the scheduler's client rate limit (50 QPS by
// default), which would otherwise cap binding throughput on this private
// server.
const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 1000
  burst: 2000
leaderElection:
  leaderElect: false
`

// startControlPlane starts, in parallel, kube-controller-manager,
// kube-scheduler, kwok and the KubeRay operator (plus the fake Ray
// dashboard), and waits until each reports healthy. They all use the
// admin kubeconfig: authorization is AlwaysAllow, so per-component
// identities would add bootstrapping and prove nothing here.
func (c *Cluster) startControlPlane(ctx context.Context, bin Binaries) error {
	ray, err := rayclient.NewForConfig(c.config)
	if err != nil {
		return err
	}
	if c.dashboard, err = newDashboard(c.client, ray); err != nil {
		return fmt.Errorf("fake Ray dashboard: %w", err)
	}
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	kwokConf := filepath.Join(c.dir, "kwok.yaml")
	if err := os.WriteFile(kwokConf, kwokConfig, 0o644); err != nil {
		return err
	}
	schedConf := filepath.Join(c.dir, "kube-scheduler.yaml")
	if err := os.WriteFile(schedConf, fmt.Appendf(nil, schedulerConfig, c.kubeconfig), 0o644); err != nil {
		return err
	}

	type component struct {
		p      **process
		bin    string
		env    []string
		args   []string
		health string
	}
	comps := []component{
		{&c.controllerManager, bin.ControllerManager, nil, []string{
			"--kubeconfig=" + c.kubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[0]),
			"--leader-elect=false",
			"--controllers=" + strings.Join(controllers, ","),
			"--service-account-private-key-file=" + filepath.Join(c.dir, "sa.key"),
			"--root-ca-file=" + filepath.Join(c.dir, "certs", "apiserver.crt"),
			"--cluster-name=kubetest",
			// Defaults are 20/30: far too slow for thousands of pods.
			"--kube-api-qps=1000",
			"--kube-api-burst=2000",
			// Shorter than the 10-30 s defaults: tests wait on these.
			"--concurrent-job-syncs=10",
			"--concurrent-gc-syncs=20",
		}, fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0])},
		{&c.scheduler, bin.Scheduler, nil, []string{
			"--config=" + schedConf,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[1]),
		}, fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[1])},
		{&c.kwok, bin.Kwok, nil, []string{
			"--kubeconfig=" + c.kubeconfig,
			"--config=" + kwokConf,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + FakeNodeAnnotation + "=" + FakeNodeAnnotationValue,
			"--node-lease-duration-seconds=40",
			"--server-address=127.0.0.1:" + strconv.Itoa(ports[2]),
			// Pod IPs: outside the service range, like a real pod CIDR.
			"--cidr=10.244.0.0/16",
			"--node-ip=10.240.0.1",
		}, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[2])},
		{&c.rayOperator, bin.RayOperator, []string{
			"KUBECONFIG=" + c.kubeconfig,
			// See Dashboard: the operator's dashboard calls go to the fake.
			"HTTP_PROXY=" + c.dashboard.ProxyURL(), "http_proxy=" + c.dashboard.ProxyURL(),
			"NO_PROXY=", "no_proxy=",
		}, []string{
			"--metrics-addr=0",
			"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[3]),
			"--enable-leader-election=false",
			"--qps=1000",
			"--burst=2000",
			"--reconcile-concurrency=4",
			"--log-stdout-encoder=console",
		}, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[3])},
	}
	for _, comp := range comps {
		name := filepath.Base(comp.bin)
		p, err := startProcessEnv(comp.bin, filepath.Join(c.dir, name+".log"), comp.env, comp.args...)
		if err != nil {
			return err
		}
		*comp.p = p
	}

	hc := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // health probes of self-signed loopback servers
	}}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make([]error, len(comps))
	for i, comp := range comps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := *comp.p
			err := p.waitFor(ctx, func() bool {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, comp.health, nil)
				resp, err := hc.Do(req)
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.StatusCode == http.StatusOK
			})
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w\n%s", p.name, err, p.logTail())
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
