package kubetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"
)

// Dashboard is a small fake of the Ray dashboard's job API (the part the
// KubeRay operator calls), standing in for the dashboard of every Ray head
// pod in the cluster: the pods run on kwok nodes, so there is no Ray head to
// answer.
//
// How requests reach it: the operator calls the dashboard at
// http://<head service>.<namespace>.svc.cluster.local:8265 with Go's
// default HTTP transport, which honours $HTTP_PROXY. kubetest starts the
// operator with HTTP_PROXY pointing here, so every dashboard request arrives
// as a proxy request whose URL names the cluster's service and namespace.
// (KubeRay's --use-kubernetes-proxy would go through the API server's
// service proxy instead, which refuses to dial the loopback address this
// fake listens on.) The API server itself is reached over HTTPS, which
// HTTP_PROXY does not cover.
//
// What it answers, in the K8sJobMode Atelier uses (the submitter Job runs
// `ray job submit` against the head and follows the job to its end):
//
//   - GET /api/jobs/<id>: the RayJob whose status.jobId is <id> in that
//     namespace, with a status derived from its submitter Job — the
//     submitter runs for as long as the Ray job does, so its pod's exit is
//     the job's end: Job Complete = SUCCEEDED, Failed = FAILED (message from
//     the submitter's termination), a running pod = RUNNING, else PENDING.
//     No such RayJob or no submitter Job yet: 404, as a head answers for a
//     job nobody submitted.
//   - POST /api/jobs/<id>/stop: marks the job STOPPED.
//   - GET /api/jobs/: the jobs of that namespace; GET /api/jobs/<id>/logs:
//     empty logs.
//
// Job submission over HTTP (HTTPMode) and Ray Serve are not implemented:
// they answer 501, which the operator reports on the RayJob/RayService.
type Dashboard struct {
	kube kubernetes.Interface
	ray  rayclient.Interface
	srv  *http.Server
	addr string

	mu       sync.Mutex
	stopped  map[string]bool // "<namespace>/<job id>"
	requests int
}

// newDashboard starts the fake on a free loopback port.
func newDashboard(kube kubernetes.Interface, ray rayclient.Interface) (*Dashboard, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &Dashboard{kube: kube, ray: ray, addr: l.Addr().String(), stopped: map[string]bool{}}
	d.srv = &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = d.srv.Serve(l) }()
	return d, nil
}

// ProxyURL is the value of HTTP_PROXY that routes dashboard calls here.
func (d *Dashboard) ProxyURL() string { return "http://" + d.addr }

// Requests returns how many requests the fake has answered.
func (d *Dashboard) Requests() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests
}

func (d *Dashboard) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return d.srv.Shutdown(ctx)
}

// jobInfo is the dashboard's JobDetails, as KubeRay decodes it.
type jobInfo struct {
	Type         string            `json:"type"`
	JobID        string            `json:"job_id"`
	SubmissionID string            `json:"submission_id"`
	Status       rayv1.JobStatus   `json:"status"`
	Entrypoint   string            `json:"entrypoint"`
	Message      string            `json:"message,omitempty"`
	StartTime    int64             `json:"start_time,omitempty"`
	EndTime      int64             `json:"end_time,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
}

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.requests++
	d.mu.Unlock()
	// A proxy request carries the target in its URL; a direct one in Host.
	host := r.URL.Hostname()
	if host == "" {
		host, _, _ = strings.Cut(r.Host, ":")
	}
	// <service>.<namespace>.svc.<cluster domain>
	parts := strings.Split(host, ".")
	if len(parts) < 3 || parts[2] != "svc" {
		http.Error(w, fmt.Sprintf("kubetest dashboard: %q is not a service address (<service>.<namespace>.svc...)", host), http.StatusBadRequest)
		return
	}
	ns := parts[1]
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()

	path := strings.TrimPrefix(r.URL.Path, "/api/jobs")
	if path == r.URL.Path {
		http.Error(w, "kubetest dashboard: only the job API (/api/jobs/) is implemented", http.StatusNotImplemented)
		return
	}
	id, action, _ := strings.Cut(strings.Trim(path, "/"), "/")
	switch {
	case id == "" && r.Method == http.MethodGet:
		d.list(ctx, w, ns)
	case id == "" && r.Method == http.MethodPost:
		http.Error(w, "kubetest dashboard: HTTP job submission is not implemented (Atelier submits with a submitter Job)", http.StatusNotImplemented)
	case action == "" && r.Method == http.MethodGet:
		info, err := d.info(ctx, ns, id)
		d.reply(w, info, err)
	case action == "stop" && r.Method == http.MethodPost:
		d.mu.Lock()
		d.stopped[ns+"/"+id] = true
		d.mu.Unlock()
		writeJSON(w, map[string]bool{"stopped": true})
	case action == "logs" && r.Method == http.MethodGet:
		writeJSON(w, map[string]string{"logs": ""})
	case action == "" && r.Method == http.MethodDelete:
		writeJSON(w, map[string]bool{"deleted": true})
	default:
		http.Error(w, fmt.Sprintf("kubetest dashboard: %s %s is not implemented", r.Method, r.URL.Path), http.StatusNotImplemented)
	}
}

var errNoJob = errors.New("no such job")

func (d *Dashboard) reply(w http.ResponseWriter, info *jobInfo, err error) {
	switch {
	case errors.Is(err, errNoJob):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		writeJSON(w, info)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (d *Dashboard) list(ctx context.Context, w http.ResponseWriter, ns string) {
	jobs, err := d.ray.RayV1().RayJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := []*jobInfo{}
	for i := range jobs.Items {
		if info, err := d.infoOf(ctx, &jobs.Items[i]); err == nil {
			out = append(out, info)
		}
	}
	writeJSON(w, out)
}

func (d *Dashboard) info(ctx context.Context, ns, id string) (*jobInfo, error) {
	jobs, err := d.ray.RayV1().RayJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range jobs.Items {
		if jobs.Items[i].Status.JobId == id {
			return d.infoOf(ctx, &jobs.Items[i])
		}
	}
	return nil, fmt.Errorf("job %s: %w in namespace %s", id, errNoJob, ns)
}

// infoOf derives a Ray job's state from its RayJob's submitter Job.
func (d *Dashboard) infoOf(ctx context.Context, rj *rayv1.RayJob) (*jobInfo, error) {
	id := rj.Status.JobId
	if id == "" {
		return nil, errNoJob
	}
	info := &jobInfo{Type: "SUBMISSION", JobID: id, SubmissionID: id, Entrypoint: rj.Spec.Entrypoint, Status: rayv1.JobStatusPending}
	// KubeRay names the submitter Job like the RayJob.
	job, err := d.kube.BatchV1().Jobs(rj.Namespace).Get(ctx, rj.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errNoJob
	}
	if err != nil {
		return nil, err
	}
	info.StartTime = job.CreationTimestamp.UnixMilli()
	d.mu.Lock()
	stopped := d.stopped[rj.Namespace+"/"+id]
	d.mu.Unlock()
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			info.Status, info.EndTime = rayv1.JobStatusSucceeded, c.LastTransitionTime.UnixMilli()
			info.Message = "Job finished successfully."
			return info, nil
		case batchv1.JobFailed:
			info.Status, info.EndTime = rayv1.JobStatusFailed, c.LastTransitionTime.UnixMilli()
			info.Message = d.failure(ctx, rj.Namespace, rj.Name)
			return info, nil
		}
	}
	if stopped {
		info.Status, info.Message = rayv1.JobStatusStopped, "Job was intentionally stopped."
		return info, nil
	}
	if job.Status.Active > 0 {
		info.Status = rayv1.JobStatusRunning
	}
	return info, nil
}

// failure says how the submitter exited, as Ray's message says how the
// entrypoint did.
func (d *Dashboard) failure(ctx context.Context, ns, job string) string {
	pods, err := d.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err == nil {
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
					return fmt.Sprintf("Job entrypoint command failed with exit code %d", t.ExitCode)
				}
			}
		}
	}
	return "Job entrypoint command failed"
}
