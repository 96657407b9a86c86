// Package local is the embedded "local runtime": it runs a container step as
// a process on the worker's machine, executing the same command (and args)
// the step's pod would run on a cluster. The image is only recorded; the
// program must be installed on the worker's machine. It also runs the
// replicas of inference endpoints created without a cluster (see
// "Inference endpoints").
//
// # One attempt
//
// Runner.RunContainer runs one attempt of a step. Each attempt gets a
// directory
//
//	<data>/runs/<run>/<step>[-<item>]/attempt-<n>/    (0711 down from <data>)
//	    work/              working directory, unless the step sets workingDir (step's, 0700)
//	    out/outputs.json   ATELIER_OUTPUTS: the step may write a JSON object here (step's, 0700)
//	    out/metrics.json   ATELIER_METRICS: and its metrics (runstate.ParseMetrics)
//	    output             the step's stdout+stderr as written, until its outcome is recorded (worker's, 0600)
//	    log, log.index     the same, redacted, as shipped; output.read: how much of output the log holds
//	    started.json, exit.json, lease   the supervisor's records (see package supervisor)
//	    result.json        the outcome, recorded before it is reported
//
// Combined output is shipped to a LogSink in ordered chunks addressed by byte
// offset, so the gateway can serve and follow logs from Postgres while the
// step runs.
//
// # Process lifecycle
//
// The process runs under a supervisor (package supervisor: the worker's
// own binary, re-executed) in a process group of its own, so that
// everything it spawns can be signalled as one unit, like a pod's
// containers. When the main process exits, the supervisor kills what it
// left behind in its group, as a pod's would be when its container exits,
// and records the exit (exit.json). Cancellation and timeouts send SIGTERM
// to the group, then SIGKILL after a grace period.
//
// The supervisor runs in a session of its own and survives its worker:
// a worker killed -9 leaves the step running (issue 29). Temporal then
// delivers the activity again (after the heartbeat timeout) and the next
// execution on this machine adopts the step (adopt.go): it finds the
// supervisor's started.json, checks that the supervisor is alive and is
// the same process (same boot, same pid and
// start time), follows the output file from where the log stood
// (output.read) and waits for exit.json; a step that ended meanwhile is
// finished from its exit record. Either way the command runs once. While
// a worker watches a step it renews the attempt's lease every heartbeat;
// a supervisor whose lease is older than the orphan timeout
// (WithOrphanTimeout, default a minute: the activity went to a worker on
// another machine, or the run was cancelled while no worker was there)
// stops the step and records it as orphaned, and the next execution runs
// it again, visibly (ATELIER_EXECUTION, a fresh work directory, a log
// line). An execution whose context Temporal cancels because it lost the
// server (heartbeats failing for the heartbeat timeout, or "not found")
// leaves the step to the execution that will adopt it; only a cancel the
// run asked for, or a stopping worker, stops it.
//
// GPU steps are attached instead: their supervisor has
// PR_SET_PDEATHSIG=SIGKILL, so supervisor and step die with the worker,
// because the devices they hold are the worker's own bookkeeping. Linux
// delivers that signal when the OS thread that forked the child exits,
// not when the worker process exits, and the Go runtime may retire
// threads; the runner therefore keeps the forking goroutine locked to its
// thread until the supervisor has been reaped. Pdeathsig only reaches the
// direct child: grandchildren survive a worker crash. To cover that, and
// steps that cannot be adopted, the runner heartbeats the process group
// id, and a later execution kills the previous execution's group before
// re-running the step, after checking that the group is still ours (same
// host and boot, and on Linux a member whose environment carries this
// attempt's ATELIER_* variables), because process group ids are recycled.
//
// # Environment
//
// A step does not inherit the worker's environment: the worker holds secrets
// (database URLs, Temporal credentials, cloud keys) that a pipeline author
// must not be able to read by printing env. A step sees only PATH, HOME,
// LANG and TMPDIR from the worker (HOME is the work dir when the step runs
// as another user), then its own env, then the ATELIER_* variables set by
// the runtime (which cannot be overridden). Anything else a step needs
// (proxies, tokens) must be set in its env. CUDA_VISIBLE_DEVICES is the
// runtime's (below).
//
// # GPUs
//
// The worker lists the machine's NVIDIA GPUs with nvidia-smi at start
// (DetectGPUs; `--local-gpus` = auto, none or device indices; a machine
// without nvidia-smi has none). A step whose resources ask for gpu: N (and
// optionally a gpuType, spelled as the nvidia.com/gpu.product label: the
// nvidia-smi name with spaces replaced by '-') gets N free devices of that
// product, each held by one step at a time (GPUSet), and sees exactly
// those through CUDA_VISIBLE_DEVICES; a step that asks for none sees none
// (an empty CUDA_VISIBLE_DEVICES) on a machine that has some, as a pod
// without a GPU request. While the devices are taken, the step waits,
// heartbeating, and its attempt says why ("waiting for local GPUs: needs 1
// …, 0 of 1 free (held: GPU 0 by <run>/<step>)"); the wait counts against
// the step's timeout, as a Job's pending time counts against its
// activeDeadlineSeconds. A request the machine can never satisfy fails the
// step at once, saying what the machine has. Devices are the worker's own
// bookkeeping, per machine: project GPU quotas and the admission queue
// (package gpu) govern Kubernetes clusters, not a worker's local devices;
// two workers on one machine must be given disjoint --local-gpus.
//
// # Inference endpoints
//
// Serving (serving.go) runs the replicas of inference endpoints created
// without a cluster: the endpoint workflow's four activities
// (activities.ObserveEndpointName and the others), registered on the
// local worker's queue, where the gateway starts such endpoints. A
// revision's replica is one process of its backend's engine, as the
// serving image would run it:
//
//	vllm:   vllm serve <inference.ContainerArgs> --host 127.0.0.1 --port P
//	triton: tritonserver <inference.ContainerArgs> --http-port P --grpc-port G --metrics-port M
//	        (each also bound to 127.0.0.1)
//
// with free ports picked at each start, so replicas share the machine.
// The executable is found on the replica's PATH, or set per backend by
// the worker's --local-engine (vllm=/path/to/modelserver makes
// examples/modelserver, which takes both engines' command lines, serve
// without a GPU). A layout whose engine is missing fails with a
// non-retryable InvalidStep error saying what to install; the workflow
// then rolls the revision back. The image is not used.
//
// A replica's process is set up as a step's: the same environment
// isolation (the four inherited variables, then the spec's env, then
// ATELIER_PROJECT, ATELIER_ENDPOINT, ATELIER_REVISION, ATELIER_REPLICA),
// the step user, its own process group, Pdeathsig, GPUs from the same
// GPUSet (a replica holds its devices while it exists and waits, reported
// as the revision's Waiting, while they are taken). Its output goes to
//
//	<data>/endpoints/<project>/<endpoint>/r<N>/<endpoint>-r<N>-<i>.log   (worker's, 0600)
//	<data>/endpoints/<project>/<endpoint>/work/   working directory (HOME as the step user), shared by revisions
//
// Each replica has a supervisor goroutine that restarts its engine when
// it exits, after a back-off that doubles with each recent exit (2 s up to
// 1 min), as a kubelet restarts a container: the workflow applies a layout
// only when the layout changes, so replacing crashed processes cannot wait
// for the next apply. A replica whose engine exited 3 times within 5
// minutes is crash-looping; the revision's Waiting then carries the
// engine's last lines of output.
//
// ApplyEndpointLayout starts missing replicas and stops extra ones
// (SIGTERM, SIGKILL after the grace period; unready ones first, then the
// newest), so a repeated layout changes nothing; ScaleDownFirst stops
// before it starts. Traffic weights are only recorded: the gateway's
// endpoint proxy splits traffic between the URLs Observe reports
// (TrafficMode "proxy"). ObserveEndpoint checks every replica's readiness
// when called (vLLM: its /v1/models lists the served model; Triton:
// /v2/health/ready answers 200), scrapes each ready one's queue metrics
// (package enginemetrics) and reports the startup milestones (Created;
// Scheduled at the first start, once the GPUs are found; ImagePulled at
// the current process's start; EngineReady since the current process
// passed its check). The delete activities stop the processes; logs and
// the working directory stay.
//
// Which processes serve which revision is the worker's memory. The worker
// also records each endpoint's applied layout (<endpoint dir>/layout.json)
// and each engine's process group (<revision dir>/<replica>.pid): when the
// worker restarts, its replicas have died with it (Pdeathsig), and the
// first activity of the endpoint in the new worker process (its workflow
// observes every tick) kills what the old one left (an engine's own
// children, which Pdeathsig does not reach, when they still carry the
// replica's environment) and starts the recorded replicas again. An
// endpoint whose workflow is gone is never observed, so nothing starts
// for it; deleting an endpoint removes its record. Because the state is
// one worker's, endpoints on the local runtime need a single worker on
// the local task queue (as `atelier dev` runs): with several, each would
// see only the replicas it started.
//
// # What the local runtime isolates, and what it does not
//
// It is not a container sandbox. When the worker runs as root, each step
// runs as an unprivileged user (WithStepUser; `--step-user`, default uid
// 65532, no supplementary groups), the worker process is non-dumpable
// (HardenWorker), the directories above a step's own are traversable but
// not listable, and the worker's files (logs, the dev stack's admin token,
// database URL and Temporal database) are 0600. So a step cannot read the
// worker's environment through /proc/$PPID/environ, its memory, its files or
// list other runs. It still shares the machine: the network (including
// Postgres and Temporal ports: use passwords, not trust auth, beyond a dev
// machine), world-readable files, /tmp, CPU and memory, and every step runs
// as the same step user, so a step that learns another run's directory name
// can read what that run left world-readable there. When the worker is not
// root, steps run as the worker's user and can read whatever that user can:
// run such a worker only for pipelines you trust, or use a Kubernetes
// cluster for isolation between tenants.
//
// The package supports Unix systems; process-group recovery is most precise
// on Linux, where /proc is available.
package local
