package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// This file is everything the real node does to the host, and undoes.
//
// Changes while the node runs, all undone by sweepNode (at Stop, and at the
// next start after a crash):
//
//   - processes: containerd, kubelet, kube-proxy (started with a
//     parent-death signal, so they die with the test binary), and one
//     containerd-shim-runc-v2 per pod plus the pods' processes (which do
//     not: the sweep kills them);
//   - mounts under realNodeBase: container root filesystems (overlayfs),
//     network namespaces, sandbox /dev/shm, kubelet's bind mount of its
//     root directory and the pods' volumes;
//   - iptables (v4 and v6): kubelet's and kube-proxy's KUBE-* chains, the
//     CNI plugins' CNI-* chains, and the rules that jump to them;
//   - the bridge realNodeBridge (the pods' veths go with their network
//     namespaces) and the address RealNodeIP/32 on lo;
//   - cgroups /<realNodeCgroup> in every hierarchy;
//   - sysctls, from the list in watchedSysctls (kubelet sets
//     vm.overcommit_memory, kernel.panic and kernel.panic_on_oops; the
//     bridge sets net.ipv4.ip_forward): their values before the start are
//     saved in host-state.json and written back;
//   - host paths that kubelet and containerd use whatever their
//     configuration says: /var/lib/kubelet (device-plugin socket),
//     /var/log/containers (log symlinks), /var/lib/cni (libcni's cache) and
//     /run/containerd (shim sockets, fifos): removed if the node created
//     them.

// hostPaths are the paths outside realNodeBase that kubelet and containerd
// create regardless of their configuration.
var hostPaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/run/containerd"}

// watchedSysctls are restored at the end. The list is what kubelet
// (setupKernelTunables), kube-proxy and the bridge and portmap CNI plugins
// may write; the other writable sysctls of the same trees are compared
// too, and any difference is reported (not undone: it may be someone
// else's).
var watchedSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding",
	"net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/forwarding",
	"net/ipv4/conf/all/route_localnet",
	"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
	"net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait", "net/netfilter/nf_conntrack_tcp_be_liberal",
	"net/netfilter/nf_conntrack_udp_timeout", "net/netfilter/nf_conntrack_udp_timeout_stream",
}

// sysctlTrees are compared before and after, to report changes outside
// watchedSysctls.
var sysctlTrees = []string{"vm", "kernel", "net/ipv4", "net/ipv6/conf/all", "net/ipv6/conf/default", "net/bridge", "net/netfilter"}

// hostState is host-state.json: what to restore.
type hostState struct {
	PID int `json:"pid"`
	// Sysctls are the watched sysctls' values before the start;
	// Snapshot every writable sysctl of sysctlTrees.
	Sysctls  map[string]string `json:"sysctls"`
	Snapshot map[string]string `json:"snapshot"`
	// Created are the hostPaths that did not exist before the start.
	Created []string `json:"created"`
}

// nodePrerequisites lists what this machine lacks to run the real node,
// each with how to get it.
func nodePrerequisites() []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the node needs network namespaces, iptables, cgroups and mounts)")
	}
	packages := map[string]string{}
	for cmd, pkg := range map[string]string{
		"runc": "runc", "iptables": "iptables", "iptables-save": "iptables", "iptables-restore": "iptables",
		"conntrack": "conntrack", "ip": "iproute2", "go": "",
	} {
		if _, err := exec.LookPath(cmd); err != nil {
			if pkg == "" {
				missing = append(missing, "the go command on PATH (to build the pause program)")
				continue
			}
			packages[pkg] = pkg
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		found := false
		for _, d := range cniPluginDirs {
			if _, err := os.Stat(filepath.Join(d, plugin)); err == nil {
				found = true
			}
		}
		if !found {
			packages["containernetworking-plugins"] = "containernetworking-plugins"
		}
	}
	if bb, err := lookBusybox(); err != nil || !isStatic(bb) {
		packages["busybox-static"] = "busybox-static"
	}
	if len(packages) > 0 {
		pk := slices.Sorted(func(yield func(string) bool) {
			for p := range packages {
				if !yield(p) {
					return
				}
			}
		})
		missing = append(missing, fmt.Sprintf("Debian packages %s (`make ensure-node` installs them as root, or apt-get install %s)",
			strings.Join(pk, ", "), strings.Join(pk, " ")))
	}
	if len(cgroupMounts()) == 0 {
		missing = append(missing, "cgroups mounted under /sys/fs/cgroup")
	}
	if b, err := os.ReadFile("/proc/filesystems"); err != nil || !bytes.Contains(b, []byte("overlay")) {
		missing = append(missing, "the overlay filesystem in the kernel")
	}
	return missing
}

func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// lockNode takes the machine-wide real-node lock (a flock on realNodeLock,
// which the kernel releases if the holder dies), reporting who holds it
// while waiting. The lock is at a fixed path, not in the cache directory,
// so that processes with different ATELIER_CACHE_DIRs still exclude each
// other. The holder removes the file when it unlocks, leaving nothing
// behind; a waiter that then finds its locked file unlinked (or replaced)
// starts over with the path's current file.
func lockNode(ctx context.Context, log func(string, ...any)) (func(), error) {
	path := realNodeLock
	start := time.Now()
	var reported time.Time
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			if sameFile(f, path) {
				_ = f.Truncate(0)
				_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d (%s)\n", os.Getpid(), strings.Join(os.Args, " "))), 0)
				return func() {
					_ = os.Remove(path) // still holding the lock: see above
					_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
					_ = f.Close()
				}, nil
			}
			f.Close() // unlinked by its last holder: take the new one
			continue
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Since(reported) >= 30*time.Second {
			holder, _ := os.ReadFile(path)
			log("waiting for the machine's real node, in use by %s (%s so far; the lock is %s)…",
				strings.TrimSpace(string(holder)), time.Since(start).Round(time.Second), path)
			reported = time.Now()
		}
		select {
		case <-ctx.Done():
			holder, _ := os.ReadFile(path)
			return nil, fmt.Errorf("the machine's real node is still in use by %s after %s (lock %s): %w",
				strings.TrimSpace(string(holder)), time.Since(start).Round(time.Second), path, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// sameFile reports whether the open file f is still the file at path.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// saveHostState records what the start is about to change, before it
// changes anything.
func saveHostState() error {
	d := nodeDirs()
	if err := os.MkdirAll(d.base, 0o700); err != nil {
		return err
	}
	st := hostState{PID: os.Getpid(), Sysctls: map[string]string{}, Snapshot: readSysctlTrees()}
	for _, k := range watchedSysctls {
		if v, err := readSysctl(k); err == nil {
			st.Sysctls[k] = v
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			st.Created = append(st.Created, p)
		}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(d.hostState, b, 0o600)
}

// prepareHost adds the node IP to lo and the cgroup root kubelet expects
// in every hierarchy.
func prepareHost() error {
	if out, err := exec.Command("ip", "addr", "add", RealNodeIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr add %s/32 dev lo: %w: %s", RealNodeIP, err, out)
	}
	for _, m := range cgroupMounts() {
		if err := os.MkdirAll(filepath.Join(m, realNodeCgroup), 0o755); err != nil {
			return fmt.Errorf("cgroup root: %w", err)
		}
	}
	return nil
}

// sweepNode undoes everything a real node may have changed on the host
// (see the top of this file), whether it stopped cleanly or its test
// binary died. The caller holds the machine-wide lock, so whatever it
// finds is no live node's. It reports what it cleaned.
func sweepNode(log func(string, ...any)) error {
	d := nodeDirs()
	var did []string
	var errs []error
	note := func(format string, args ...any) { did = append(did, fmt.Sprintf(format, args...)) }

	// 1. The node's own processes (a crashed run's containerd-shims outlive
	// it: they are reparented to init), then the pods' processes.
	if n := killNodeProcesses(d.base); n > 0 {
		note("%d node processes killed", n)
	}
	for _, m := range cgroupMounts() {
		n, err := removeCgroupTree(filepath.Join(m, realNodeCgroup))
		if err != nil {
			errs = append(errs, err)
		}
		if n > 0 {
			note("%d pod processes killed in %s", n, filepath.Join(m, realNodeCgroup))
		}
	}
	// 2. Mounts: root filesystems, network namespaces, volumes.
	left, n, err := unmountUnder(d.base)
	if err != nil {
		errs = append(errs, err)
	}
	if n > 0 {
		note("%d mounts", n)
	}
	// 3. iptables.
	for _, tool := range []string{"iptables", "ip6tables"} {
		n, err := removeChains(tool)
		if err != nil {
			errs = append(errs, err)
		}
		if n > 0 {
			note("%d %s chains (KUBE-*, CNI-*)", n, tool)
		}
	}
	// 4. The bridge and the node IP.
	if exec.Command("ip", "link", "show", realNodeBridge).Run() == nil {
		if out, err := exec.Command("ip", "link", "del", realNodeBridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link del %s: %w: %s", realNodeBridge, err, out))
		} else {
			note("bridge %s", realNodeBridge)
		}
	}
	if out, _ := exec.Command("ip", "-o", "addr", "show", "dev", "lo").Output(); bytes.Contains(out, []byte(" "+RealNodeIP+"/32 ")) {
		if out, err := exec.Command("ip", "addr", "del", RealNodeIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip addr del %s/32 dev lo: %w: %s", RealNodeIP, err, out))
		} else {
			note("%s/32 on lo", RealNodeIP)
		}
	}
	// 5. Sysctls and host paths, as saved at the start.
	var st hostState
	if b, err := os.ReadFile(d.hostState); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.hostState, err))
		}
	}
	for _, k := range watchedSysctls {
		want, ok := st.Sysctls[k]
		if !ok {
			continue
		}
		got, err := readSysctl(k)
		if err != nil || got == want {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(want), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s to %s: %w", sysctlName(k), want, err))
			continue
		}
		note("sysctl %s %s→%s", sysctlName(k), got, want)
	}
	if st.Snapshot != nil {
		now := readSysctlTrees()
		var other []string
		for _, k := range slices.Sorted(mapKeys(st.Snapshot)) {
			if v, ok := now[k]; ok && v != st.Snapshot[k] && !slices.Contains(watchedSysctls, k) {
				other = append(other, fmt.Sprintf("%s %s→%s", sysctlName(k), st.Snapshot[k], v))
			}
		}
		if len(other) > 0 {
			log("real node: sysctls changed while the node ran, not restored (not known to be the node's): %s", strings.Join(other, ", "))
		}
	}
	for _, p := range hostPaths {
		if slices.Contains(st.Created, p) {
			if _, err := os.Lstat(p); err == nil {
				if err := os.RemoveAll(p); err != nil {
					errs = append(errs, err)
				} else {
					note("%s", p)
				}
			}
		}
	}
	if st.Created == nil {
		// No state (or a host where these existed): only what is the
		// node's for sure.
		links, _ := filepath.Glob("/var/log/containers/*.log")
		for _, l := range links {
			if t, err := os.Readlink(l); err == nil && strings.HasPrefix(t, d.base+"/") {
				_ = os.Remove(l)
			}
		}
		_ = os.Remove("/var/lib/kubelet/device-plugins/kubelet.sock")
	}
	// 6. The node's directory, unless something is still mounted in it
	// (removing files through a mount would reach beyond it).
	if _, err := os.Stat(d.base); err == nil {
		if len(left) > 0 {
			errs = append(errs, fmt.Errorf("%s kept: still mounted: %s", d.base, strings.Join(left, ", ")))
		} else if err := os.RemoveAll(d.base); err != nil {
			errs = append(errs, err)
		}
	}
	if len(did) > 0 {
		log("real node: host restored: %s", strings.Join(did, "; "))
	}
	return errors.Join(errs...)
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func sysctlName(k string) string { return strings.ReplaceAll(k, "/", ".") }

func readSysctl(k string) (string, error) {
	b, err := os.ReadFile("/proc/sys/" + k)
	return strings.TrimSpace(string(b)), err
}

// sysctlSkip are writable sysctls that change by themselves or cannot be
// read back meaningfully.
var sysctlSkip = []string{"kernel/ns_last_pid", "kernel/random/", "vm/drop_caches", "vm/compact_memory", "vm/stat_refresh",
	"net/ipv4/route/flush", "net/ipv4/neigh/", "kernel/perf_event_max_sample_rate", "kernel/tainted"}

// readSysctlTrees reads every writable sysctl under sysctlTrees, leaving
// out per-interface settings (interfaces come and go).
func readSysctlTrees() map[string]string {
	out := map[string]string{}
	for _, tree := range sysctlTrees {
		root := "/proc/sys/" + tree
		_ = filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			k := strings.TrimPrefix(p, "/proc/sys/")
			if de.IsDir() {
				if strings.HasPrefix(k, "net/ipv4/conf/") && k != "net/ipv4/conf/all" && k != "net/ipv4/conf/default" {
					return filepath.SkipDir
				}
				return nil
			}
			for _, s := range sysctlSkip {
				if strings.HasPrefix(k, s) {
					return nil
				}
			}
			info, err := de.Info()
			if err != nil || info.Mode().Perm()&0o200 == 0 {
				return nil
			}
			if v, err := readSysctl(k); err == nil {
				out[k] = v
			}
			return nil
		})
	}
	return out
}

// cgroupMounts returns the mount points of every cgroup hierarchy (v1
// controllers and the v2 unified one).
func cgroupMounts() []string {
	var out []string
	for _, m := range mountInfo() {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			out = append(out, m.point)
		}
	}
	return out
}

type mount struct{ point, fstype string }

// mountInfo parses /proc/self/mountinfo.
func mountInfo() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mount{point: unescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return out
}

// unescapeMount decodes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount at or below dir, deepest first, and
// returns those it could not.
func unmountUnder(dir string) (left []string, n int, err error) {
	var errs []error
	for pass := 0; pass < 5; pass++ {
		var under []string
		for _, m := range mountInfo() {
			if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
				under = append(under, m.point)
			}
		}
		if len(under) == 0 {
			return nil, n, nil
		}
		slices.SortFunc(under, func(a, b string) int { return len(b) - len(a) })
		errs = errs[:0]
		for _, p := range under {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("umount %s: %w", p, err))
			} else {
				n++
			}
		}
		left = under
	}
	return left, n, errors.Join(errs...)
}

// nodeCommands are the node's executables, by base name.
var nodeCommands = []string{"kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "runc"}

// killNodeProcesses SIGKILLs every node process whose command line names
// base (the node's directory), and waits for them to go.
func killNodeProcesses(base string) int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if !slices.Contains(nodeCommands, filepath.Base(args[0])) || !strings.Contains(string(b), base) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			pids = append(pids, pid)
		}
	}
	waitGone(pids, 10*time.Second)
	return len(pids)
}

// waitGone waits until none of pids is alive (zombies count as gone).
func waitGone(pids []int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for time.Now().Before(deadline) && alive(pid) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// removeCgroupTree kills every process in the cgroup at root and below,
// then removes the cgroups, deepest first. It returns how many processes
// it killed.
func removeCgroupTree(root string) (int, error) {
	if _, err := os.Stat(root); err != nil {
		return 0, nil
	}
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	killed := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pids []int
		for _, d := range dirs {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
					pids = append(pids, pid)
				}
			}
		}
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("cgroup %s: processes %v survive SIGKILL", root, pids)
		}
		for _, pid := range pids {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		waitGone(pids, 2*time.Second)
		time.Sleep(20 * time.Millisecond)
	}
	var errs []error
	for _, d := range slices.Backward(dirs) {
		var err error
		for try := 0; try < 50; try++ {
			// EBUSY for a moment after the last process is reaped.
			if err = syscall.Rmdir(d); err == nil || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
		}
	}
	return killed, errors.Join(errs...)
}

// removeChains deletes the KUBE-* and CNI-* chains and every rule that
// jumps to one, in every table, by rewriting the tables that have any with
// iptables-restore (which replaces a table's rules and chains with those
// given).
func removeChains(tool string) (int, error) {
	if _, err := exec.LookPath(tool + "-save"); err != nil {
		return 0, nil
	}
	out, err := exec.Command(tool + "-save").Output()
	if err != nil {
		// No IPv6 (ip6tables) or no netfilter: nothing to clean.
		return 0, nil
	}
	ours := func(name string) bool { return strings.HasPrefix(name, "KUBE-") || strings.HasPrefix(name, "CNI-") }
	var keep []string
	removed := 0
	changed := false
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && strings.HasPrefix(f[0], ":") && ours(f[0][1:]):
			removed++
			changed = true
			continue
		case len(f) > 1 && f[0] == "-A" && ours(f[1]):
			changed = true
			continue
		case len(f) > 1 && f[0] == "-A" && jumpsToOurs(f, ours):
			changed = true
			continue
		}
		keep = append(keep, line)
	}
	if !changed {
		return 0, nil
	}
	cmd := exec.Command(tool + "-restore")
	cmd.Stdin = strings.NewReader(strings.Join(keep, "\n"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s-restore without the node's chains: %w: %s", tool, err, b)
	}
	return removed, nil
}

func jumpsToOurs(f []string, ours func(string) bool) bool {
	for i := 0; i+1 < len(f); i++ {
		if (f[i] == "-j" || f[i] == "-g") && ours(f[i+1]) {
			return true
		}
	}
	return false
}

// RealNodeTraces lists what a real node has left on the host: its
// processes, pod processes in its cgroups, mounts, iptables chains, the
// bridge, the node IP on lo, cgroups, its directory and its lock file. Empty after Stop or
// a sweep. (Sysctls are compared by the tests themselves:
// WatchedSysctls.)
func RealNodeTraces() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if slices.Contains(nodeCommands, filepath.Base(args[0])) && strings.Contains(string(b), realNodeBase) {
			if pid, _ := strconv.Atoi(e.Name()); alive(pid) {
				out = append(out, fmt.Sprintf("process %s %s", e.Name(), filepath.Base(args[0])))
			}
		}
	}
	for _, m := range cgroupMounts() {
		root := filepath.Join(m, realNodeCgroup)
		if _, err := os.Stat(root); err == nil {
			out = append(out, "cgroup "+root)
		}
	}
	for _, m := range mountInfo() {
		if strings.HasPrefix(m.point, realNodeBase+"/") || m.point == realNodeBase {
			out = append(out, "mount "+m.point)
		}
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		b, _ := exec.Command(tool).Output()
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, ":KUBE-") || strings.HasPrefix(line, ":CNI-") {
				out = append(out, tool+" chain "+strings.Fields(line)[0][1:])
			}
		}
	}
	if exec.Command("ip", "link", "show", realNodeBridge).Run() == nil {
		out = append(out, "link "+realNodeBridge)
	}
	if b, _ := exec.Command("ip", "-o", "addr", "show", "dev", "lo").Output(); bytes.Contains(b, []byte(" "+RealNodeIP+"/32 ")) {
		out = append(out, "address "+RealNodeIP+"/32 on lo")
	}
	if _, err := os.Stat(realNodeBase); err == nil {
		out = append(out, "directory "+realNodeBase)
	}
	if _, err := os.Stat(realNodeLock); err == nil {
		out = append(out, "lock file "+realNodeLock)
	}
	return out
}

// WatchedSysctls returns the current values of the sysctls a real node
// may change and restores (by dotted name), for tests to compare before
// and after.
func WatchedSysctls() map[string]string {
	out := map[string]string{}
	for _, k := range watchedSysctls {
		if v, err := readSysctl(k); err == nil {
			out[sysctlName(k)] = v
		}
	}
	return out
}

// SweepRealNode restores the host after a real node whose test binary
// died (SIGKILL, go test -timeout) without stopping it: the next start
// does this anyway, and `make clean-node` runs it by hand. It waits up to
// timeout for the machine-wide lock, so it never touches a live node.
func SweepRealNode(timeout time.Duration, log func(string, ...any)) error {
	if log == nil {
		log = progress
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root", ErrNodeUnavailable)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	unlock, err := lockNode(ctx, log)
	if err != nil {
		return err
	}
	defer unlock()
	return sweepNode(log)
}
