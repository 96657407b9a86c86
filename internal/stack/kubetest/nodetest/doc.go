// Package nodetest holds the tests of kubetest's real node (RealNode): a
// real kubelet, containerd, runc, CNI bridge and kube-proxy joined to a
// control plane, running real containers; and the host restored after it,
// whether it was stopped or its test binary was killed. It has no code:
// only tests, in a package of their own because they need a
// StartControlPlane cluster and, as root, the machine's one real node.
package nodetest
