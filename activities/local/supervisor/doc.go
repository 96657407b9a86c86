// Package supervisor is the small process that stands between the local
// runtime's worker and a step's process, so that a step outlives the worker
// that started it (issue 29).
//
// A step's process cannot simply be left running when its worker dies: no
// other process could learn how it ended (only a parent can wait for a
// child), and its output went to a pipe the dead worker held. So the worker
// starts a supervisor (its own binary, re-executed: Pool.Start), which
//
//   - reads what to run (Spec) from its stdin, so the step's environment,
//     secrets included, never lands on disk or in a command line;
//   - starts the step's process in a process group of its own, with the
//     step's stdout and stderr on a file of the attempt directory (the
//     worker follows that file into the step's log), tied to the
//     supervisor by PR_SET_PDEATHSIG;
//   - writes started.json (which process, since when) before it answers the
//     worker, and exit.json (exit code, signal, when) atomically when the
//     process ends, after killing what the process left in its group;
//   - runs in a session of its own, so a worker killed -9 (or stopped) does
//     not take it along; unless it is attached (Spec.OrphanAfter 0), when
//     it dies with the worker's forking thread, as steps always did.
//
// A worker that is delivered the same attempt again finds started.json,
// checks that the supervisor named there is alive (Alive: same boot, a
// process with its pid that started when it did), and adopts it (Adopt):
// it follows the output file from where the previous worker stopped and
// waits for exit.json. While a
// worker watches a step it renews the attempt's lease file (Renew) every
// heartbeat; a supervisor whose lease is older than Spec.OrphanAfter
// concludes that no worker will come back (the activity went to a worker
// on another machine, or the run was cancelled meanwhile), stops the step
// as a cancelled pod would be stopped (SIGTERM, grace, SIGKILL) and
// records it as orphaned.
//
// Every binary that imports the local runtime (the atelier command, tests,
// benchmarks) can act as the supervisor: this package's init takes over
// the process when its environment and argv[0] say so, before main runs.
// Starting the atelier binary costs tens of milliseconds on a busy
// machine (the package inits before this one's), so a Pool keeps one
// supervisor started ahead, idle on its stdin, for the next step.
package supervisor
