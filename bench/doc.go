// Package bench holds Atelier's benchmark programs. They print figures;
// they never assert on time (a timed assertion on a shared machine only
// measures the neighbours). Each is a self-contained main:
//
//	go run ./bench/overhead [-n 200] [-r 5] [-quick] [-v]
//	go run ./bench/starts   [-n 2000] [-c 32] [-rounds 2] [-quick] [-v] [-cpuprofile f]
//	go run ./bench/kubecp   [-starts 3] [-nodes 1000] [-pods 10000] [-quick]
//	go run ./bench/realnode [-starts 3] [-pods 20] [-hold 5] [-quick]
//	go run ./bench/jobstep  [-r 10] [-quick]
//	go run ./bench/gpusched [-r 300] [-naive 3] [-pending 10000] [-nodes 1000] [-quick]
//	go run ./bench/gpuadmit [-n 3000] [-depth 1000] [-probes 50] [-preempts 20] [-nodes 1000] [-runs 2] [-items 1000] [-reps 3] [-pipeline-only] [-cpuprofile f] [-quick]
//	go run ./bench/serving  [-rounds 10] [-rollbacks 5] [-quick]
//	go run ./bench/coldstart [-rounds 5] [-burst 5] [-load 2s] [-quick]
//	go run ./bench/listruns [-n 1000000] [-projects 100] [-samples 200] [-rounds 3] [-page 50] [-quick]
//	go run ./bench/fanout   [-n 10000] [-p 1000] [-r 3] [-big 100000] [-quick] [-v]
//	go run ./bench/artifacts [-size 1GiB] [-files 10000] [-file-size 4KiB] [-shards 4] [-shard-size 128MiB] [-reps 5] [-quick] [-only file,dir,shards]
//	go run ./bench/launchsign [-files 5000] [-file-size 1024] [-reps 5] [-s3] [-latency 0] [-quick]
//
// Each program except gpusched (pure code, no server), kubecp and realnode
// (a Kubernetes control plane), listruns (Postgres only:
// benchstack.StartDatabase), artifacts (an S3 server only: s3test.Run) and
// launchsign (the gateway's launcher routes in-process; with -s3 an S3
// server)
// starts its own
// Temporal dev server (devstack.StartTemporal: in-memory, headless,
// TunedDynamicConfig, so the numbers are those of the dev stack and of the
// integration tests), creates a fresh Postgres
// database bench_<random> on the server devstack.EnsurePostgres finds
// ($ATELIER_DATABASE_URL, else 127.0.0.1:5432 trusting postgres/root, else
// a throwaway cluster under $TMPDIR/atelier-bench, stopped at the end), runs
// the gateway and/or a worker in-process (bench/internal/benchstack), and
// drops the database and stops the server when done (also on Ctrl-C).
// Progress goes to stderr; the report (markdown: the exact command, the
// machine, the versions, then the tables) goes to stdout, so
// `go run ./bench/overhead > overhead.md` keeps just the report.
//
// Every program measures a subject against a baseline in the same run, on
// the same server and worker, with repetitions interleaved (baseline,
// subject, baseline, ...) after a warm-up, so slow drift of a noisy machine
// hits both alike. Read the ratios first, then the absolute figures; the
// "per-run p50 min–max" / "per-round" columns show how much the machine
// moved during the run. Targets are printed next to the figures with
// "meets"/"MISSES"; they are goals for a quiet machine, not pass/fail. Use
// -quick for a smoke run (small N) and compare only full runs.
//
// # overhead: orchestration overhead per step
//
// What a step costs on top of the work itself: for consecutive steps i and
// i+1 of one run, attempts[0].StartedAt(i+1) − attempts[0].FinishedAt(i),
// i.e. from the moment step i's process exited to the moment step i+1's
// process started (both taken by the local runtime, activities/local), over
// N sequential no-op steps (`true`), so N−1 samples per run.
//
//   - subject: workflows.PipelineWorkflow (the declarative interpreter)
//     running a pipeline of N container steps, each depending on the
//     previous one. It is started directly with the SDK on the worker's task
//     queue (no HTTP: this measures orchestration); the times are read from
//     the run status mirrored to Postgres (the status query as fallback).
//   - baseline: a hand-written Temporal workflow (bench.Chain) calling the
//     same activity (activities.RunContainerName, the same local.Runner on
//     the same worker) with the same ContainerRequest N times in sequence,
//     with plain ActivityOptions (StartToCloseTimeout 1m). What the subject
//     costs beyond this is Atelier's (status bookkeeping, DAG scheduling,
//     mirror, heartbeat options).
//   - empty activity: the same workflow with an activity that does nothing,
//     i.e. the raw Temporal activity round trip on this server. The
//     difference baseline − empty is the local runtime's own per-step cost
//     (attempt directories, log stream, fork/exec), paid by both modes.
//
// Reported per mode over all measured runs: p50, p90, p99, max, the spread
// (min–max of the per-run p50) and the mean step period (start to start,
// i.e. gap plus the process's own lifetime). Then subject/baseline ratios of
// p50 and p99 against the targets (subject p50 ≤ 8 ms, p99 ≤ 25 ms, p50
// ratio ≤ 1.2×).
//
// The last table splits each gap at the Temporal history's event times
// (same host, same clock as the runner's timestamps): process exit →
// ActivityTaskCompleted (runner wrap-up, completion RPC), → WorkflowTaskStarted
// (server schedules and dispatches the workflow task), → WorkflowTaskCompleted
// (worker runs the workflow code and answers), → next process start (eager
// activity dispatch, runner setup, fork/exec). With history events and
// workflow tasks per step and activities per run, it shows where a subject
// that is slower than the baseline spends the difference: an extra workflow
// task or activity per step shows up in the counts, a heavier workflow task
// in the third column, a slower runner in the first and last.
//
// # starts: run starts through REST vs raw SDK
//
// C concurrent clients each start runs as fast as they can until N starts
// are done; per mode, 2 rounds of N, interleaved (baseline, subject,
// baseline, subject) after a small warm-up of each.
//
//   - subject: POST /v1/projects/bench/runs {"pipeline":"noop","params":{}}
//     through the real gateway (wire.InitGateway, keep-alive HTTP client
//     with 2·C idle connections), for a pipeline "noop" of one step `true`
//     created through REST first: the gateway authenticates, reads the
//     pipeline version, inserts the PENDING run row, then starts the
//     workflow.
//   - baseline: client/runclient.StartRun (the gateway's own start code,
//     a thin wrapper over client.ExecuteWorkflow) of
//     runstate.PipelineWorkflowName with the PipelineInput the gateway
//     would build, on the same task queue, unique IDs, and so the same
//     start options (search attributes including created-by, memo, ID
//     policies), so the ratio isolates what the gateway adds.
//
// No worker runs: both modes only start workflows, identical in that
// respect. A worker would execute every started run (mirror writes to
// Postgres, a process per run) on the same two cores during the
// measurement, and the backlog of one round would be drained during the
// next, charging one mode for the other's work.
//
// Reported per mode: starts/s (successful starts over the rounds' wall
// time, plus per round), latency p50/p99/max, errors (grouped), the ratios
// subject/baseline of rate and p99 against the targets (rate ≥
// 0.95×, p99 ≤ 1.5×), and the zero-lost check: every run the gateway
// answered 201 for (warm-up included) must have its row in Postgres
// (store.GetRun) and its execution in Temporal (DescribeWorkflowExecution);
// the counts of accepted, found in each and missing are printed.
//
// Also per mode: CPU per accepted start (user + system from /proc, read
// around each round) of this process (clients, and the gateway in the
// subject's rounds), the Temporal dev server (a child process) and the
// Postgres backends of the benchmark's database. Rates move with whatever
// else the machine runs; CPU per start moves much less, and on a CPU-bound
// machine the rate ratio tends to the inverse ratio of the totals. What
// the stack spends idle (the gateway's reconciler, webhook dispatcher and
// retention loops, the dev server's own pollers), measured for 10 s before
// the rounds, is taken out of each round in proportion to its length:
// otherwise the slower mode would look dearer per start by that
// background alone.
//
// -pin puts the Temporal server on CPU 0 and this process and its Postgres
// backends on CPU 1 (all threads; GOMAXPROCS 1), as when the engine runs on
// machines of its own: then the ratio says whether the gateway keeps up
// with the engine rather than how much CPU it takes from it.
//
// # kubecp: the Kubernetes control plane of the tests
//
// internal/stack/kubetest's StartControlPlane (kube-apiserver, etcd,
// kube-controller-manager, kube-scheduler, kwok, the KubeRay operator) on
// this machine, no Temporal or Postgres: the time to come up (the first
// start, then -starts more: median and min–max, split into API server,
// CRDs and the rest), -nodes mixed fake GPU nodes created with
// kubetest.CreateNodes until kwok reports them Ready, -pods small pods
// created by parallel clients until the scheduler has bound all of them
// (pods scheduled per second, from the first create) and until kwok
// reports them Running, and every component's RSS at that fleet, before
// and after the pods. There is no baseline: these are capacity figures
// for the tests and benchmarks built on the control plane.
//
// # realnode: the tests' real Kubernetes node
//
// internal/stack/kubetest's real node (kubelet, containerd, runc, CNI
// bridge, kube-proxy), as root, on a control plane of its own, no Temporal
// or Postgres: -starts node starts and stops (containerd and images, lock
// → Ready, and the stop that restores the host), then -pods pods run one
// at a time, from the create call to Succeeded, against the same pod on a
// kwok fake node as baseline (interleaved): the difference is what a real
// container start costs. Then the RSS of kubelet, containerd, kube-proxy
// and the shims with -hold sleeping pods. Without root it says what is
// missing and exits 0.
//
// # jobstep: a one-step pipeline by placement
//
// The whole stack (Temporal, Postgres, gateway, local worker, a cluster
// worker in-process, the control plane and the real node), as root: the
// same one-step pipeline (`echo`) started through REST and polled until
// SUCCEEDED, placed on the local runtime (the baseline), on the cluster
// with its Job's pod on a kwok fake node (exits at once: Atelier and the
// control plane), and on the real node (a real container); interleaved,
// -r runs each after a warm-up round; medians, spread and the ratios to
// the local runtime's. Without root it says what is missing and exits 0.
//
// # gpuadmit: GPU admission end to end
//
// The real worker runs the admission workflow and its activities against
// a registered cluster of 1,000 nodes × 8 H100 (inventory written to
// Postgres) and 33 projects with policies.
//
//   - pipeline path (first): runs real pipeline runs, -runs at once, each a
//     forEach of -items items (parallelism = items) on the cluster, each
//     item a container step asking for one GPU in a project whose quota is
//     the whole cluster; the baseline, interleaved, is the same runs
//     without GPUs (no admission). The cluster's Kubernetes worker is stood
//     in by the benchmark (objects succeed at once). From the runs'
//     histories: run started → each item's Kubernetes step scheduled, the
//     rate from the first start to the last admission, history events per
//     item.
//
// The other phases use "waiter" workflows that do what a run with one GPU
// step does: submit with the real batch activity (one workload), wait for
// the admission in SignalGPUUpdates, hold, release.
//
//   - baseline: a signal round trip between two workflows (ping → pong →
//     ping), the floor any durable admission pays.
//   - throughput: n one-GPU waiters over 30 projects, all fitting: first
//     submission to last admission (the waiters' own starts included).
//   - admission workflow alone: n submissions signalled straight to the
//     admission workflow from 32 clients, answered to one sink workflow.
//   - wait at depth: depth workloads of a project without quota stay
//     queued; probes of other projects fit and are timed one by one.
//   - preemption: a low-priority workload holds a project's quota (the
//     minimum runtime set to 1 ms); a high-priority one arrives. Timed:
//     submission to the victim told, and to the high-priority admission
//     (the victim released).
//
// # serving: the inference endpoint workflow's reactions
//
// The real worker runs atelier.Endpoint; the endpoint's activities are a
// fake runtime in the same process whose replicas are ready as soon as
// they are applied and report the load they are given (so an engine's own
// start-up is zero and what is left is Atelier's):
//
//   - autoscaler reaction: a queue of 35 appears on the replicas (target
//     10 per replica); timed from then to the workflow's scale-up decision
//     (its ScaleDecided event), against the tick (2 s) as the baseline.
//   - decision → replicas applied: from that decision to the fake runtime
//     receiving the new replica count.
//   - rollback: an update to a revision whose replicas crash-loop; timed
//     from the fake's first report of the crash loop to the rollback.
//
// Timestamps are wall time for the fake's side and workflow time (the
// same machine's clock, read by the server) for the workflow's events.
//
// # coldstart: scale from zero through the gateway
//
// A gateway and a worker in-process; an endpoint on the local runtime
// whose replica is a real examples/modelserver process (built by the
// program) told to take -load to load its model. Each round waits for the
// endpoint to scale to zero (idle timeout 30 s, so a round takes about
// 40 s), then sends -burst completions at once through the gateway with a
// 2-minute deadline.
//
//   - subject: time from the burst to each answer (the first, and all),
//     and the requests that failed.
//   - baseline: the same binary started by hand, exec → its model listed
//     on /v1/models: the engine's own cold start. Their difference is
//     Atelier's part (wake-up signal, decision, process start, the
//     observation that sees it ready, the proxy's route refresh).
//
// # listruns: listing runs at scale
//
// A fresh database loaded with N generated runs (storetest.Synthetic:
// generate_series in Postgres, the listing indexes dropped during the load
// and rebuilt from their own definitions, then VACUUM ANALYZE): 10% of the
// runs in project p000 (100,000 of the default 1,000,000), the rest spread
// over 99 projects; 20 pipelines and 8 creator tokens per project (a
// quarter of the runs with no creator: SDK starts), 7 states (85%
// SUCCEEDED, 1% PENDING, ...), created over a year. Then, for each filter
// the API offers and their combinations (project; pipeline; state; a
// rarely matching state; createdBy; createdAfter; a createdAfter/Before
// window; page 20 reached with the cursor), it lists one page of 50 newest
// first, with the filter's values (project, pipeline, creator, state,
// window) drawn at random per sample so that samples read different index
// ranges rather than one hot page:
//
//   - store: (*store.Store).ListRuns, the catalogue query alone;
//   - REST: GET /v1/projects/{p}/runs through the gateway's handler
//     in-process (httptest, no TCP): token lookup, validation, the same
//     query, the JSON page;
//   - baseline: (*store.Store).GetRun of a random run by primary key, the
//     cheapest read the catalogue makes, on the same pool.
//
// The three are interleaved per sample (baseline, store, REST) in R rounds
// of S samples per filter. Reported per filter: rows per page, p50/p99/max
// of store and REST, the spread of the store's per-round p50, the
// baseline's p50/p99 over the same period, the table and index sizes, and
// the target (p99 ≤ 20 ms). Deeper pages cost the same as the first (the
// cursor is an index condition), which the page-20 row shows.
//
// # fanout: a wide forEach against a hand-written fan-out
//
// N items (default 10,000) of a no-op step at parallelism P (1,000), on a
// worker of the benchmark's own whose atelier.container.run activity does
// nothing (no process: the figures are the orchestration's, not fork/exec)
// and whose control worker runs the mirror and the wide forEach activities
// against the benchmark's Postgres, as internal/process/app does. Both modes run
// on that worker, with the same worker options.
//
//   - subject: workflows.PipelineWorkflow with one forEach step over
//     "0..N-1" (wide: batch child workflows, item records in Postgres),
//     started directly with the SDK.
//   - baseline: a hand-written workflow in the style of the samples-go
//     batch samples: partitions of the list as child workflows, a sliding
//     window of them, each running its range as a sliding window of the
//     same activity with continue-as-new, with the very batch size,
//     per-batch window and number of batches in flight that Atelier's plan
//     uses (workflows.WidePlan), and nothing recorded anywhere; and the
//     same with an Atelier step's activity options (baseline+step-options).
//   - subject-go: a native Go pipeline (bench.GoFanOut) whose one step is
//     Run.ForEach over "0..N-1": the Go API's way into the same wide path.
//
// Reported: wall time from start to the workflow's result (median and
// min–max over -r interleaved runs after a warm-up each), items/s, the
// CPU time of the Temporal dev server process and of this process (worker
// and activities) during each run, history events of the run and its
// batches; the targets (subject < 60 s, subject ≤ 1.3× baseline). -big
// then runs one forEach of that many items through Atelier alone and
// reports the same for it.
//
// # artifacts: step artifacts through the content-addressed store
//
// A versitygw S3 server (internal/stack/s3test.Run: posix backend in a
// temporary directory, loopback), one bucket; the subject is
// internal/platform/artifactstore opened on it (prefix artifacts/), the
// baseline gocloud.dev/blob's s3blob on the same server and bucket (prefix
// direct/), opened from the same kind of URL:
//
//   - file up: a file of -size (1 GiB) of fresh random bytes. Subject
//     Store.PutPath (hash the whole and each 16 MiB part in one read,
//     look the digest up, upload the parts with their sha256 for the
//     server to check); baseline io.Copy of the file into bucket.NewWriter
//     with default WriterOptions.
//   - file down: the object just stored. Subject Store.Get (temporary file
//     beside the destination, digest check, rename); baseline
//     bucket.NewReader copied into a new file.
//   - directory up/down: -files (10,000) files of -file-size (4 KiB), 100
//     to a subdirectory. Subject PutPath/Get (DefaultParallel files at a
//     time, plus the manifest); baseline a walk of the directory (up) or
//     the known list of files (down), each file copied as above by
//     -parallel (16) goroutines.
//   - large files up/down: -shards (4) files of -shard-size (128 MiB), a
//     model's shards: the same two modes. No ratio target of its own; it
//     shows the memory of parallel large uploads.
//
// Each transfer runs in a fresh child process of the same binary (a hidden
// first argument; the job on stdin, the outcome on stdout as JSON): it
// opens the bucket, reads its VmRSS, times the transfer alone, and reports
// its VmHWM (peak RSS) and CPU time; the parent adds versitygw's CPU time
// over the child's life (/proc/<pid>/stat). The program does not import
// benchstack (its package initialization alone adds ~20 MiB to every
// child's RSS). Per repetition, fresh random bytes (so the
// content-addressed store never finds them stored), sync(2) before every
// transfer, baseline and subject in alternating order, and the bucket's
// objects removed afterwards (from the backend's directory). A warm-up
// round at small sizes comes first.
//
// Reported per transfer and mode: MB/s (10⁶ bytes) median and min–max,
// files/s, seconds, client and server CPU, peak RSS, the RSS once the
// bucket was opened, and their difference (the transfer's own memory);
// then the ratios of the median MB/s with the per-repetition paired
// ratios' min–max, against the targets (file ≥ 0.9×, directory ≥ 0.8×,
// a transfer's memory < 64 MiB). -cpuprofile and -memprofile write a
// profile of every measured transfer; -only file,dir,shards measures only
// those transfers.
//
// # gpusched: one GPU admission cycle
//
// gpu.Schedule on a synthetic snapshot (gpu/gpusynth, fixed seed): 1,000
// nodes (40% 8×A100, 30% 8×H100, 20% 4×L4, 10% A100 split into 28
// mig-1g.10gb slices; 3% tainted, 1% not ready), 100 projects in 4
// cohorts whose nominal quotas add up to the fleet, running workloads
// (admitted by Schedule itself) holding 85% of it, and 10,000 pending
// gangs (mostly 1 GPU, some 2–8-GPU pods, a few 2–16-node jobs of 8-GPU
// pods, MIG requests; priorities 0–10; submitted over 6 hours).
//
//   - subject: one Schedule call with the 10,000 pending workloads.
//   - baseline: the same snapshot with an empty queue: the fixed cost of
//     a cycle (indexing the fleet, the policy and the running workloads).
//   - one-per-cycle baseline: Schedule in a loop that applies only the
//     first admission of each plan, as a scheduler admitting one head per
//     cycle would (Kueue admits one workload per ClusterQueue per cycle),
//     until it has admitted as many workloads as the subject's single
//     cycle or a cycle admits none; its total time against one cycle.
//
// Reported: p50/p90/p99/max of the wall time per cycle and the per-round
// p50 spread (subject and empty queue interleaved in rounds of 20), the
// CPU time of the measuring thread per cycle (CLOCK_THREAD_CPUTIME_ID:
// what a cycle costs without the time spent waiting for a core, which
// dominates wall time on a loaded machine), the plan's content, and the
// target (p99 ≤ 10 ms).
package bench
