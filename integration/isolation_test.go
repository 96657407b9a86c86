package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// asProject returns a view of the stack acting for another project, with
// an editor token of its own (created with the project).
func (s *stack) asProject(name string) *stack {
	s.t.Helper()
	ctx := context.Background()
	_, err := s.store.CreateProject(ctx, catalog.Project{Name: name})
	require.NoError(s.t, err)
	secret, hash := tokens.New()
	_, err = s.store.CreateToken(ctx, catalog.Token{Name: name + "-editor", Project: name, Role: tokens.RoleEditor}, hash)
	require.NoError(s.t, err)
	o := *s
	o.project, o.token = name, secret
	return &o
}

// Seen by a user: a step printed the worker's ATELIER_DATABASE_URL, read
// /proc/$PPID/environ and the dev stack's admin token by relative path, so
// any editor became global admin. A step must see none of it.
func TestStepSeesNoneOfTheWorkersSecrets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the worker must run as root for steps to run as another user; as a normal user steps share the worker's user (documented)")
	}
	s := newStack(t)
	// Set after the stack found its database: storetest reads this too.
	t.Setenv("ATELIER_DATABASE_URL", "postgres://worker-secret@127.0.0.1/atelier")
	// What `make dev` keeps beside the data dir.
	state := filepath.Dir(s.cfg.DataDir)
	require.NoError(t, os.WriteFile(filepath.Join(state, "admin-token"), []byte("atl_admin_secret\n"), 0o600))

	s.createPipeline("snoop", `
steps:
  - name: snoop
    container:
      command: ["sh", "-c"]
      args:
        - |
          exec 2>&1
          echo "uid=$(id -u)"
          env
          cat /proc/$PPID/environ
          cat "$PWD/../../../../../../admin-token"
          ls "$PWD/../../../.."
          exit 0
`)
	id := s.start("snoop", nil)
	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	log := s.stepLog(id, "snoop", &gen.GetStepLogsParams{Attempt: ptrTo(1)})
	for _, secret := range []string{"worker-secret", "atl_admin_secret", "ATELIER_DATABASE_URL", "\n" + id + "\n"} {
		assert.NotContains(t, log, secret)
	}
	assert.Contains(t, log, "uid=65532")
	assert.Equal(t, 3, strings.Count(log, "Permission denied"), "environ, token and runs listing must each be refused:\n%s", log)
}

// Seen by a user: one template killed every worker with "fatal error: out
// of memory" (Temporal hands the task to the next worker, which dies too).
// It must fail its own step with a clear message while another project's
// runs on the same worker keep succeeding.
func TestTemplateOverBudgetFailsItsStepOnly(t *testing.T) {
	s := newStack(t)
	other := s.asProject("team-b")
	s.createPipeline("bomb", `
steps:
  - name: bomb
    container:
      command: ["true"]
      env: {X: '{{ repeat(repeat("x", 999999), 20000) }}'}
  - name: doubling
    container:
      command: ["true"]
      env: {"Y": '{{ reduce(1..40, #acc + #acc, "x") }}'}
`)
	fine := `
steps:
  - name: hello
    container: {command: ["sh", "-c", "echo hello"]}
`
	other.createPipeline("fine", fine)
	bomb := s.start("bomb", nil)
	ok := other.start("fine", nil)

	r := s.waitTerminal(bomb, 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	for _, step := range []string{"bomb", "doubling"} {
		st := stepByName(r, step)
		assert.Equal(t, gen.StepStateFAILED, st.State, step)
		assert.Contains(t, val(st.Error), "over budget", step)
	}
	assert.Equal(t, gen.RunStateSUCCEEDED, other.waitTerminal(ok, 60*time.Second).State)
	// The worker is still alive for the next run of the same project.
	s.createPipeline("fine", fine)
	assert.Equal(t, gen.RunStateSUCCEEDED, s.waitTerminal(s.start("fine", nil), 60*time.Second).State)
}
