package rayjob

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// Ray steps keep the outputs contract of every other kind — write a JSON
// object to the file named by $ATELIER_OUTPUTS — although the entrypoint
// runs as a Ray driver on the head pod, where no termination message can
// reach the step. Two small wrappers carry the file across:
//
//  1. wrapEntrypoint runs the entrypoint with ATELIER_OUTPUTS and
//     ATELIER_METRICS pointing at files on the head (unique per job: a
//     shared cluster runs many) and, when it exits, prints each file it
//     wrote as one marker line into the job's log.
//  2. submitterScript is KubeRay's own K8sJobMode submitter command (check
//     status, submit --no-wait, follow the logs; see KubeRay v1.6.0
//     common.BuildJobSubmitCommand) with the followed log tee'd, and the last
//     marker lines written to the submitter's termination message, where the
//     backend reads every kind's outputs: the metrics line first
//     (framework.MetricsMarker), then the outputs. Both share the
//     message's 4 KiB: metrics that would push the outputs past it are
//     dropped, saying so in the step's log, rather than failing a finished
//     training job.
//
// Both are plain POSIX/bash shell and are executed by the tests.

// OutputsMarker prefixes the line that carries a Ray job's outputs.
const OutputsMarker = "ATELIER_OUTPUTS_JSON="

// headOutputsPath is where the driver writes its outputs on the head pod.
func headOutputsPath(jobName string) string { return "/tmp/atelier-outputs-" + jobName + ".json" }

// headMetricsPath is where the driver writes its metrics on the head pod.
func headMetricsPath(jobName string) string { return "/tmp/atelier-metrics-" + jobName + ".json" }

// shellQuote quotes s for POSIX sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// wrapEntrypoint returns the entrypoint Ray runs: the user's, then the
// metrics and outputs markers. Its exit code is the user's. A JSON file's
// line breaks are dropped (JSON strings hold none).
func wrapEntrypoint(entrypoint string) string {
	// A subshell, so an `exit` in the entrypoint still reaches the markers.
	script := "(\n" + entrypoint + "\n)\nrc=$?\n" +
		`if [ -n "$ATELIER_METRICS" ] && [ -s "$ATELIER_METRICS" ]; then printf '\n%s%s\n' '` + framework.MetricsMarker + `' "$(tr -d '\n' < "$ATELIER_METRICS")"; fi` + "\n" +
		`if [ -s "$ATELIER_OUTPUTS" ]; then printf '\n%s%s\n' '` + OutputsMarker + `' "$(tr -d '\n' < "$ATELIER_OUTPUTS")"; fi` + "\nexit $rc"
	return "sh -c " + shellQuote(script)
}

// submitterScript is the submitter container's bash script. KubeRay sets
// RAY_DASHBOARD_ADDRESS and RAY_JOB_SUBMISSION_ID in the container; the
// termination-log path can be overridden for tests.
func submitterScript(entrypoint string, runtimeEnv map[string]any) (string, error) {
	env := ""
	if len(runtimeEnv) > 0 {
		b, err := json.Marshal(runtimeEnv)
		if err != nil {
			return "", fmt.Errorf("runtimeEnv: %w", err)
		}
		env = " --runtime-env-json " + shellQuote(string(b))
	}
	addr := `"http://${RAY_DASHBOARD_ADDRESS#http://}"`
	return strings.Join([]string{
		`set -o pipefail`,
		`term="${ATELIER_TERMINATION_LOG:-/dev/termination-log}"`,
		`if ! ray job status --address ` + addr + ` "$RAY_JOB_SUBMISSION_ID" >/dev/null 2>&1; then`,
		`  ray job submit --address ` + addr + ` --no-wait` + env + ` --submission-id "$RAY_JOB_SUBMISSION_ID" -- ` + shellQuote(entrypoint) + ` || exit $?`,
		`fi`,
		`ray job logs --address ` + addr + ` --follow "$RAY_JOB_SUBMISSION_ID" | tee /tmp/atelier-job.log`,
		`rc=$?`,
		`m="$(grep '^` + framework.MetricsMarker + `' /tmp/atelier-job.log | tail -n 1)"`,
		`o="$(grep '^` + OutputsMarker + `' /tmp/atelier-job.log | tail -n 1 | sed 's/^` + OutputsMarker + `//')"`,
		// Byte counts (wc), not characters: the kubelet cuts bytes.
		`if [ -n "$m" ] && [ $(( $(printf '%s\n%s' "$m" "$o" | wc -c) )) -gt ` + strconv.Itoa(framework.MaxTerminationMessage) + ` ]; then`,
		`  echo "[atelier] the step's metrics ($(printf '%s' "$m" | wc -c | tr -d ' ') bytes) are not kept: with its outputs they pass Kubernetes' ` + strconv.Itoa(framework.MaxTerminationMessage>>10) + ` KiB termination message (report fewer numbers or shorter series)"`,
		`  m=""`,
		`fi`,
		`{ if [ -n "$m" ]; then printf '%s\n' "$m"; fi; printf '%s' "$o"; } > "$term" || true`,
		`exit $rc`,
	}, "\n"), nil
}
