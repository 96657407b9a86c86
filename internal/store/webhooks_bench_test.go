package store_test

import (
	"fmt"
	"testing"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/runstate"
)

// BenchmarkMirrorRun measures what webhooks add to the mirror write: a
// status without events takes the plain statement; a terminal one (every
// run's last write) takes the statement that also queues deliveries, in a
// project without webhooks and in one with a subscribed webhook.
//
//	go test ./internal/store -run '^$' -bench MirrorRun -benchtime 2000x
func BenchmarkMirrorRun(b *testing.B) {
	for _, c := range []struct {
		name    string
		state   runstate.State
		webhook bool
	}{
		{"running-no-event", runstate.Running, false},
		{"finished-no-webhooks", runstate.Succeeded, false},
		{"finished-one-webhook", runstate.Succeeded, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := store.Open(b.Context(), storetest.NewDatabase(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			if err := s.Migrate(b.Context()); err != nil {
				b.Fatal(err)
			}
			if _, err := s.CreateProject(b.Context(), catalog.Project{Name: "p"}); err != nil {
				b.Fatal(err)
			}
			if c.webhook {
				if _, err := s.CreateWebhook(b.Context(), catalog.Webhook{Project: "p", URL: "https://example.com/h",
					Events: []string{catalog.EventRunFinished}, Secret: "0123456789abcdef", Enabled: true}, 50); err != nil {
					b.Fatal(err)
				}
			}
			steps := make([]runstate.StepStatus, 10)
			for i := range steps {
				steps[i] = runstate.StepStatus{Name: fmt.Sprintf("s%d", i), Kind: "container", State: runstate.StepSucceeded}
			}
			b.ResetTimer()
			for i := range b.N {
				if err := s.MirrorRun(b.Context(), runStatus(fmt.Sprintf("r%d", i), 1, c.state, steps...)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
