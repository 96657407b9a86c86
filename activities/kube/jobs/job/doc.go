// Package job runs container steps as batch/v1 Jobs.
//
// A Job runs one pod with one container, "step", built from pipeline.Container:
// image (required), command, args, env, workingDir and resources. It never
// retries by itself (backoffLimit 0, restartPolicy Never): retries belong
// to the pipeline, which makes every attempt visible. The attempt's timeout
// is also set as activeDeadlineSeconds, so Kubernetes stops the pod even if
// no worker is watching. ttlSecondsAfterFinished is left unset, as the
// pipeline deletes its objects when the run ends, except for the items of
// a wide step (KubeStepRequest.DeleteAfter): their Jobs delete themselves
// a while after they finish, so 100,000 of them do not wait for the run's
// end.
package job
