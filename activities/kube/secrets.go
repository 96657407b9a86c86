package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/platform/redact"
	"github.com/atelier-ml/atelier/pipeline"
)

// SecretResolver opens a project's secrets by name (the vault). A name the
// project has no secret of is a catalog.ErrNotFound.
type SecretResolver interface {
	Resolve(ctx context.Context, project string, names []string) (map[string]string, error)
}

// WithSecrets lets container, ray and spark steps reference project
// secrets: each attempt gets a Kubernetes Secret of its own holding the
// values it references, owned by its object (Job, RayJob,
// SparkApplication: so deleted with it) and deleted as soon as the attempt
// ends.
func WithSecrets(s SecretResolver) Option { return func(b *Backend) { b.secrets = s } }

// stepSecretName is the Secret of the attempt whose object is name.
func stepSecretName(name string) string { return name + "-secrets" }

// stepSecret builds the attempt's Secret, or nil when the step references
// no secret and has no launcher grant (launchGrant, sealed). A missing
// secret or a worker without a key fails the step for good; a catalogue
// that cannot be reached is retried.
func (b *Backend) stepSecret(ctx context.Context, req activities.KubeStepRequest, meta metav1.ObjectMeta, launchGrant string) (*corev1.Secret, error) {
	refs := secretRefs(req)
	if len(refs) == 0 && launchGrant == "" {
		return nil, nil
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: stepSecretName(meta.Name), Namespace: meta.Namespace, Labels: meta.Labels},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{},
	}
	if launchGrant != "" {
		sec.Data[launch.GrantKey] = []byte(launchGrant)
	}
	if len(refs) == 0 {
		return sec, nil
	}
	if b.secrets == nil {
		return nil, framework.Invalid("the step references secrets but the worker of cluster %s has no secrets key (ATELIER_SECRETS_KEY_URL)", b.cluster)
	}
	var names []string
	for _, s := range refs {
		names = append(names, s.Name)
	}
	values, err := b.secrets.Resolve(ctx, req.Project, names)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, framework.Invalid("%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("resolving the step's secrets: %w", err)
	}
	for n, v := range values {
		sec.Data[n] = []byte(v)
	}
	return sec, nil
}

// secretRefs are the secret references of the step's kind: a container's,
// a ray job's or a spark application's.
func secretRefs(req activities.KubeStepRequest) []pipeline.SecretEnv {
	switch {
	case req.Container != nil:
		return req.Container.Secrets
	case req.Ray != nil:
		return req.Ray.Secrets
	case req.Spark != nil:
		return req.Spark.Secrets
	}
	return nil
}

// ensureSecret creates the attempt's Secret, or refreshes the one an
// earlier execution of the attempt made.
func (r *stepRun) ensureSecret(ctx context.Context) error {
	if r.secret == nil {
		return nil
	}
	cs := r.b.clients.Kube.CoreV1().Secrets(r.secret.Namespace)
	_, err := cs.Create(ctx, r.secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := cs.Get(ctx, r.secret.Name, metav1.GetOptions{})
		if gerr != nil {
			return framework.WrapAPI(gerr, "get Secret %s/%s", r.secret.Namespace, r.secret.Name)
		}
		cur.Data = r.secret.Data
		_, err = cs.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return framework.WrapAPI(err, "create Secret %s/%s", r.secret.Namespace, r.secret.Name)
	}
	return nil
}

// ownSecret makes the attempt's object the owner of its Secret, so that
// the garbage collector deletes the Secret with the object even if no
// worker is left to do it.
func (r *stepRun) ownSecret(ctx context.Context, obj framework.Object) error {
	if r.secret == nil {
		return nil
	}
	cs := r.b.clients.Kube.CoreV1().Secrets(r.secret.Namespace)
	cur, err := cs.Get(ctx, r.secret.Name, metav1.GetOptions{})
	if err != nil {
		return framework.WrapAPI(err, "get Secret %s/%s", r.secret.Namespace, r.secret.Name)
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	apiVersion, kind := gvk.GroupVersion().String(), gvk.Kind
	if kind == "" {
		apiVersion, kind = "batch/v1", r.kind.Kind()
		if v, ok := r.kind.(framework.Versioned); ok {
			apiVersion = v.APIVersion()
		}
	}
	for _, o := range cur.OwnerReferences {
		if o.UID == obj.GetUID() {
			return nil
		}
	}
	cur.OwnerReferences = append(cur.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: obj.GetName(), UID: obj.GetUID()})
	if _, err := cs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return framework.WrapAPI(err, "own Secret %s/%s", r.secret.Namespace, r.secret.Name)
	}
	return nil
}

// dropSecret deletes the attempt's Secret once the attempt has ended: the
// container read its environment when it started.
func (r *stepRun) dropSecret(ctx context.Context) {
	if r.secret == nil || r.leftRunning {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := r.b.clients.Kube.CoreV1().Secrets(r.secret.Namespace).Delete(ctx, r.secret.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		// Its owner reference still has it collected with the object.
		r.logger.Warn("could not delete the attempt's Secret", zap.String("secret", r.secret.Name), zap.Error(err))
	}
}

// redactor hides the values of the attempt's secrets (and its launcher's
// grant); nil when it has none.
func (r *stepRun) redactor() *redact.Redactor {
	if r.secret == nil {
		return nil
	}
	values := make(map[string]string, len(r.secret.Data))
	for n, v := range r.secret.Data {
		values[n] = string(v)
	}
	return redact.New(values)
}

// redactOutputs replaces the values of the attempt's secrets in the
// strings of its outputs (read from the pod's termination message).
func (r *stepRun) redactOutputs(res activities.KubeStepResult) activities.KubeStepResult {
	if r.secret == nil {
		return res
	}
	res.Outputs = r.redactor().Outputs(res.Outputs)
	return res
}
