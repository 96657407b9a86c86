// Package cli is the user-facing half of the `atelier` binary: the commands
// that drive a running Atelier through its REST API (login, pipelines,
// run, runs, logs, cancel, approve/reject, schedules, endpoints), in the
// style of kubectl and the temporal CLI. The server commands (gateway, worker, dev) live in
// cmd/atelier and internal/process/app.
//
// Every command talks to the gateway through the generated client
// (api/gen, ClientWithResponses), so the CLI sees exactly what any other
// API user sees. Where it talks to is, first to last: the --url, --token,
// --project flags; the ATELIER_URL, ATELIER_TOKEN, ATELIER_PROJECT
// environment variables; the current context of the config file that
// `atelier login` writes ($ATELIER_CONFIG, else
// $XDG_CONFIG_HOME/atelier/config.yaml; 0600, since it holds tokens).
//
// Output: data goes to stdout (-o table, the default, or json, yaml),
// messages and live progress to stderr, so `-o json` output can be piped.
// Exit codes (ExitError):
//
//	0  success (for --watch: the run SUCCEEDED)
//	1  an error: bad arguments, an API problem (its detail and every field
//	   error are printed), the gateway unreachable
//	2  the watched run FAILED
//	3  the watched run was CANCELLED or TERMINATED
package cli
