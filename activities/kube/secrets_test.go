package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	sparkv1beta2 "github.com/kubeflow/spark-operator/v2/api/v1beta2"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
)

// vault is a SecretResolver over fixed values, recording what it was asked.
type vault struct {
	values map[string]string
	asked  [][]string
}

func (v *vault) Resolve(_ context.Context, project string, names []string) (map[string]string, error) {
	v.asked = append(v.asked, slices.Clone(names))
	out := map[string]string{}
	for _, n := range names {
		val, ok := v.values[project+"/"+n]
		if !ok {
			return nil, fmt.Errorf("secret %s: %w", n, catalog.ErrNotFound)
		}
		out[n] = val
	}
	return out, nil
}

// The attempt's Secret holds the values of the references of whichever
// kind the request carries (container, ray, spark), keyed by secret name,
// named and labelled after the attempt's object; a step without
// references gets none, a missing secret or a worker without a key fails
// the step for good.
func TestStepSecretOfEveryKind(t *testing.T) {
	refs := []pipeline.SecretEnv{{Name: "hf-token", Env: "HF_TOKEN"}, {Name: "gcp-sa", File: "creds.json"}}
	v := &vault{values: map[string]string{"p/hf-token": "hf-value", "p/gcp-sa": "{\"key\": 1}"}}
	b := &Backend{secrets: v, cluster: "east"}
	meta := metav1.ObjectMeta{Name: "train-a1-0123456789", Namespace: "atelier-p", Labels: map[string]string{"atelier.dev/run": "r"}}
	base := activities.KubeStepRequest{Project: "p", RunID: "r", Step: "train", Attempt: 1}
	for _, tc := range []struct {
		kind activities.KubeKind
		set  func(*activities.KubeStepRequest, []pipeline.SecretEnv)
	}{
		{activities.KubeJob, func(r *activities.KubeStepRequest, s []pipeline.SecretEnv) {
			r.Container = &pipeline.Container{Image: "x", Secrets: s}
		}},
		{activities.KubeRayJob, func(r *activities.KubeStepRequest, s []pipeline.SecretEnv) {
			r.Ray = &pipeline.RayStep{Entrypoint: "python t.py", Secrets: s}
		}},
		{activities.KubeSparkApp, func(r *activities.KubeStepRequest, s []pipeline.SecretEnv) {
			r.Spark = &pipeline.SparkStep{Type: "Python", Secrets: s}
		}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			req := base
			req.Kind = tc.kind
			tc.set(&req, refs)
			sec, err := b.stepSecret(context.Background(), req, meta, "")
			if err != nil {
				t.Fatal(err)
			}
			if sec == nil || sec.Name != "train-a1-0123456789-secrets" || sec.Namespace != "atelier-p" || sec.Labels["atelier.dev/run"] != "r" {
				t.Fatalf("Secret %+v", sec)
			}
			if len(sec.Data) != 2 || string(sec.Data["hf-token"]) != "hf-value" || string(sec.Data["gcp-sa"]) != "{\"key\": 1}" {
				t.Errorf("data %q", sec.Data)
			}
			if got := v.asked[len(v.asked)-1]; !slices.Equal(got, []string{"hf-token", "gcp-sa"}) {
				t.Errorf("resolved %v", got)
			}

			// No references: no Secret.
			none := base
			none.Kind = tc.kind
			tc.set(&none, nil)
			if sec, err := b.stepSecret(context.Background(), none, meta, ""); sec != nil || err != nil {
				t.Errorf("no references: %+v, %v", sec, err)
			}

			// A secret the project lacks, a worker without a key: InvalidStep.
			missing := base
			missing.Kind = tc.kind
			tc.set(&missing, []pipeline.SecretEnv{{Name: "absent", Env: "X"}})
			for what, bb := range map[string]*Backend{"missing secret": b, "no key": {cluster: "east"}} {
				_, err := bb.stepSecret(context.Background(), missing, meta, "")
				var app *temporal.ApplicationError
				if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !app.NonRetryable() {
					t.Errorf("%s: %v", what, err)
				}
			}
		})
	}
}

// attemptSecret waits for the attempt's Secret to be owned by the object
// (uid) and returns it.
func (k *cluster) attemptSecret(name string, uid types.UID) *corev1.Secret {
	k.t.Helper()
	var sec *corev1.Secret
	eventually(k.t, "the attempt's Secret owned by its object", func() bool {
		var err error
		sec, err = k.clients.Kube.CoreV1().Secrets(k.ns).Get(ctxT(k.t), name, metav1.GetOptions{})
		return err == nil && len(sec.OwnerReferences) == 1 && sec.OwnerReferences[0].UID == uid
	})
	return sec
}

// A ray step with a secret against the API server: the attempt's Secret
// holds the value and is owned by the RayJob (ray.io/v1, so the garbage
// collector finds it), the RayJob only names it, a failure message that
// quotes the value (KubeRay copies Ray's, which ends with the job's last
// log lines) is redacted, and the Secret is gone once the attempt ended.
func TestRayJobSecrets(t *testing.T) {
	k := startCluster(t)
	const value = "hf-0123456789-value"
	b := k.backend(WithSecrets(&vault{values: map[string]string{"vision/hf-token": value}}))
	req := rayRequest("train")
	req.Ray.Secrets = []pipeline.SecretEnv{{Name: "hf-token", Env: "HF_TOKEN"}}
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 47)
	out := newRunner(t, b, nil).runStep(req)
	j := k.waitRayJob(name)
	sec := k.attemptSecret(name+"-secrets", j.UID)
	if string(sec.Data["hf-token"]) != value {
		t.Errorf("Secret data %q", sec.Data)
	}
	if o := sec.OwnerReferences[0]; o.APIVersion != "ray.io/v1" || o.Kind != "RayJob" || o.Name != name {
		t.Errorf("owner %+v", o)
	}
	stored, _ := json.Marshal(j)
	if strings.Contains(string(stored), value) || !strings.Contains(string(stored), `"secretKeyRef":{"name":"`+name+`-secrets","key":"hf-token"}`) {
		t.Errorf("stored RayJob: %s", stored)
	}

	k.outputPod(name+"-a", map[string]string{"job-name": name}, "ray-job-submitter", 1, "")
	k.setRayStatus(name, func(s *rayv1.RayJobStatus) {
		s.JobDeploymentStatus, s.JobStatus = rayv1.JobDeploymentStatusFailed, rayv1.JobStatusFailed
		s.Reason = rayv1.AppFailed
		s.Message = "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\nbad token " + value
	})
	app := appErr(t, wait(t, out).err, activities.ErrTypeStepFailed)
	if strings.Contains(app.Message(), value) || !strings.Contains(app.Message(), "bad token [secret hf-token]") {
		t.Errorf("message %q", app.Message())
	}
	eventually(t, "the attempt's Secret deleted", func() bool {
		_, err := k.clients.Kube.CoreV1().Secrets(k.ns).Get(ctxT(t), name+"-secrets", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// A spark step with secrets against the API server: the attempt's Secret
// is owned by the SparkApplication (sparkoperator.k8s.io/v1beta2), which
// names it in envSecretKeyRefs and its templates' volume, never holding a
// value; the driver's outputs are redacted; the Secret is gone at the end.
func TestSparkSecrets(t *testing.T) {
	k := startCluster(t)
	const value = "db-0123456789-value"
	b := k.backend(WithSecrets(&vault{values: map[string]string{"vision/db-password": value, "vision/gcp-sa": "{}-sa-json"}}))
	req := sparkRequest("etl")
	req.Spark.Secrets = []pipeline.SecretEnv{{Name: "db-password", Env: "DB_PASSWORD"}, {Name: "gcp-sa", File: "creds.json"}}
	name := framework.ObjectName(req.RunID, req.Step, req.Item, 2, 63)
	out := newRunner(t, b, nil).runStep(req)
	apps := k.clients.Spark.SparkoperatorV1beta2().SparkApplications(k.ns)
	var a *sparkv1beta2.SparkApplication
	eventually(t, "SparkApplication", func() bool {
		var err error
		a, err = apps.Get(ctxT(t), name, metav1.GetOptions{})
		return err == nil
	})
	sec := k.attemptSecret(name+"-secrets", a.UID)
	if string(sec.Data["db-password"]) != value || string(sec.Data["gcp-sa"]) != "{}-sa-json" {
		t.Errorf("Secret data %q", sec.Data)
	}
	if o := sec.OwnerReferences[0]; o.APIVersion != "sparkoperator.k8s.io/v1beta2" || o.Kind != "SparkApplication" {
		t.Errorf("owner %+v", o)
	}
	if ref := a.Spec.Driver.EnvSecretKeyRefs["DB_PASSWORD"]; ref.Name != name+"-secrets" || ref.Key != "db-password" || a.Spec.Executor.Template == nil {
		t.Errorf("stored spec: driver refs %v, executor template %v", a.Spec.Driver.EnvSecretKeyRefs, a.Spec.Executor.Template)
	}
	stored, _ := json.Marshal(a)
	if strings.Contains(string(stored), value) || strings.Contains(string(stored), "sa-json") {
		t.Errorf("stored SparkApplication holds a value: %s", stored)
	}

	k.outputPod(name+"-driver", map[string]string{"sparkoperator.k8s.io/app-name": name, "spark-role": "driver"},
		"spark-kubernetes-driver", 0, `{"password": "`+value+`"}`)
	k.setSparkStatus(name, sparkv1beta2.SparkApplicationStatus{AppState: sparkv1beta2.ApplicationState{State: sparkv1beta2.ApplicationStateCompleted},
		DriverInfo: sparkv1beta2.DriverInfo{PodName: name + "-driver"}, TerminationTime: metav1.Now()})
	o := wait(t, out)
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.Outputs["password"] != "[secret db-password]" {
		t.Errorf("outputs %v", o.res.Outputs)
	}
	eventually(t, "the attempt's Secret deleted", func() bool {
		_, err := k.clients.Kube.CoreV1().Secrets(k.ns).Get(ctxT(t), name+"-secrets", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
