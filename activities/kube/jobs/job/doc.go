// Package job runs container steps as batch/v1 Jobs.
//
// A Job runs one pod with one container, "step", built from pipeline.Container:
// image (required), command, args, env, workingDir and resources. It never
// retries by itself (backoffLimit 0, restartPolicy Never): retries belong
// to the pipeline, which makes every attempt visible. The attempt's timeout
// is also set as activeDeadlineSeconds, so Kubernetes stops the pod even if
// no worker is watching. ttlSecondsAfterFinished is left unset, as the
// pipeline deletes its objects when the run ends, except for the items of
// a wide step (KubeStepRequest.DeleteAfter): once a worker has read a
// finished item's outcome it sets the Job's ttlSecondsAfterFinished
// (framework.Expiring), so 100,000 Jobs do not wait for the run's end. It
// is never set at creation: a Job that finished while no worker watched
// (the worker was killed, or its execution was superseded during a stall)
// stays until the retry adopts it and reads its outputs.
package job
