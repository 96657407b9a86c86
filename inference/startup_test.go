package inference

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/schema"
)

func TestCheckStartup(t *testing.T) {
	d := StartupDeadlines{Scheduled: schema.Duration(10 * time.Minute), ImagePulled: schema.Duration(20 * time.Minute), EngineReady: schema.Duration(30 * time.Minute)}
	min := func(m float64) time.Time { return sec(m * 60) }
	tests := []struct {
		name     string
		now      time.Time
		replicas []ReplicaStartup
		want     StartupReport
	}{{
		name:     "each phase's clock starts at the previous phase",
		now:      min(25),
		replicas: []ReplicaStartup{{Replica: "b", Created: min(0), Scheduled: min(8)}, {Replica: "a", Created: min(0)}},
		want: StartupReport{
			Overdue:      []StartupOverdue{{Replica: "a", Phase: PhaseScheduled, Deadline: min(10)}},
			NextDeadline: min(28), // b: pulled by 8 + 20
		},
	}, {
		name:     "a phase reached late is overdue",
		now:      min(60),
		replicas: []ReplicaStartup{{Replica: "a", Created: min(0), Scheduled: min(1), ImagePulled: min(2), EngineReady: min(40)}},
		want:     StartupReport{Overdue: []StartupOverdue{{Replica: "a", Phase: PhaseEngineReady, Deadline: min(32), Late: true}}},
	}, {
		name: "ready replicas, and a later milestone implies the earlier ones",
		now:  min(5),
		replicas: []ReplicaStartup{
			{Replica: "a", Created: min(0), Scheduled: min(1), ImagePulled: min(2), EngineReady: min(4)},
			{Replica: "b", Created: min(0), ImagePulled: min(3)},
		},
		want: StartupReport{Ready: 1, NextDeadline: min(33)},
	}, {
		name:     "no creation time, no clock",
		now:      min(500),
		replicas: []ReplicaStartup{{Replica: "a"}},
		want:     StartupReport{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, CheckStartup(tt.now, d, tt.replicas)); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a zero budget disables its phase", func(t *testing.T) {
		got := CheckStartup(min(500), StartupDeadlines{EngineReady: schema.Duration(time.Minute)}, []ReplicaStartup{{Replica: "a", Created: min(0)}})
		if len(got.Overdue) != 0 || !got.NextDeadline.IsZero() {
			t.Errorf("report = %+v", got)
		}
	})
}
