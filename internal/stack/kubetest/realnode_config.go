package kubetest

import (
	"fmt"
	"path/filepath"
	"strings"
)

// realNodeDirs are the real node's files, all under realNodeBase.
type realNodeDirs struct {
	base                                                                string
	containerdRoot, containerdState, containerdSock, containerdConfig   string
	containerdOpt, runc                                                 string
	cniConf, cniConflist, cniData                                       string
	kubelet, podLogs, kubeletConfig, kubeProxyConfig, images, hostState string
}

func nodeDirs() realNodeDirs {
	b := realNodeBase
	return realNodeDirs{
		base:             b,
		containerdRoot:   filepath.Join(b, "containerd", "root"),
		containerdState:  filepath.Join(b, "containerd", "state"),
		containerdSock:   filepath.Join(b, "containerd", "containerd.sock"),
		containerdConfig: filepath.Join(b, "containerd", "config.toml"),
		containerdOpt:    filepath.Join(b, "containerd", "opt"),
		runc:             filepath.Join(b, "runc"),
		cniConf:          filepath.Join(b, "cni", "net.d"),
		cniConflist:      filepath.Join(b, "cni", "net.d", "10-atelier-node.conflist"),
		cniData:          filepath.Join(b, "cni", "ipam"),
		kubelet:          filepath.Join(b, "kubelet"),
		podLogs:          filepath.Join(b, "pod-logs"),
		kubeletConfig:    filepath.Join(b, "kubelet.yaml"),
		kubeProxyConfig:  filepath.Join(b, "kube-proxy.yaml"),
		images:           filepath.Join(b, "images"),
		hostState:        filepath.Join(b, "host-state.json"),
	}
}

// cniPluginDirs are where distributions install the CNI plugins (Debian's
// containernetworking-plugins: /usr/lib/cni).
var cniPluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// containerdConfig is containerd v2's configuration (version 3): the
// defaults, relocated under the node's directory, with the settings this
// kind of machine needs.
//
//   - restrict_oom_score_adj: the sandbox has no CAP_SYS_RESOURCE, so runc
//     cannot give a container a negative oom_score_adj ("can't get final
//     child's PID from pipe: EOF" for every pod); the scores are clamped to
//     containerd's own (0) instead.
//   - netns_mounts_under_state_dir and runc's Root keep network
//     namespaces and runc's state out of /var/run.
//   - NRI, CDI and the opt directory would use /var/run/nri, /etc/cdi and
//     /opt/containerd: off, or moved.
//   - The sandbox image is the locally built pause (no registry here).
func containerdConfig(d realNodeDirs) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri']

[grpc]
  address = %[3]q

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = %[4]q

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[5]q

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          Root = %[6]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[7]s]
      conf_dir = %[8]q
`, d.containerdRoot, d.containerdState, d.containerdSock, d.containerdOpt, PauseImage, d.runc,
		quoteList(cniPluginDirs), d.cniConf)
}

func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}

// cniConfig is the pod network: a bridge with the pods' gateway, IP
// masquerade for traffic leaving the pod network, and host-local IPAM
// whose state lives under the node's directory.
func cniConfig(d realNodeDirs) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "atelier-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %[1]q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[2]q, "gateway": %[3]q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %[4]q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, realNodeBridge, RealNodePodCIDR, realNodeGateway, d.cniData)
}

// kubeletConfig is kubelet's configuration. Beyond relocating everything
// under the node's directory:
//
//   - failCgroupV1: false — this host is on cgroup v1, which kubelet 1.35
//     refuses by default.
//   - The node registers tainted (RealNodeLabel, NoSchedule), so that only
//     pods meant for it run there.
//   - Image garbage collection never triggers: the images were imported,
//     not pulled, and could not be pulled again.
//   - Eviction thresholds low enough for a shared test machine's disk.
//   - Anonymous, AlwaysAllow access to its API: the API server reads logs
//     from it without a client certificate, as the rest of this test
//     cluster trusts everyone on loopback.
func kubeletConfig(d realNodeDirs) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
port: %[4]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[5]d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
podLogsDir: %[6]s
registerWithTaints:
  - {key: %[7]s, value: "true", effect: NoSchedule}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
nodeStatusUpdateFrequency: 5s
serializeImagePulls: false
`, realNodeCgroup, d.containerdSock, RealNodeIP, kubeletPort, kubeletHealthzPort, d.podLogs, RealNodeLabel)
}

// kubeProxyConfig is kube-proxy's configuration (iptables mode). Its
// conntrack and localhost-NodePort settings are the ones that leave the
// host's sysctls alone (nf_conntrack_max, the TCP timeouts,
// route_localnet).
func kubeProxyConfig(kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
clusterCIDR: %[3]s
bindAddress: 127.0.0.1
healthzBindAddress: %[4]s
metricsBindAddress: %[5]s
iptables:
  localhostNodePorts: false
  syncPeriod: 5s
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, RealNodeName, RealNodePodCIDR, kubeProxyHealthz, kubeProxyMetrics)
}
