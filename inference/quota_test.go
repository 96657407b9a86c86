package inference

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckQuota(t *testing.T) {
	rev := func(n int, res Resources, mut func(*RolloutSettings)) Revision {
		s := vllmSpec()
		s.Resources = res
		if mut != nil {
			mut(&s.Rollout)
		}
		return Revision{Number: n, Spec: WithDefaults(s)}
	}
	twoA100 := Resources{GPUType: a100, GPUs: 2}
	stable := rev(1, twoA100, nil)
	tests := []struct {
		name      string
		stable    *Revision
		cand      Revision
		target    int
		headroom  []GPUAmount
		want      QuotaCheck
		wantMsg   string
		suggested *RolloutSettings
	}{{
		name:   "rolling with surge 1 needs one replica's GPUs",
		stable: &stable, cand: rev(2, twoA100, nil), target: 4,
		headroom: []GPUAmount{{a100, 1}, {a100, 1}},
		want:     QuotaCheck{Fits: true, PeakReplicas: 5, Extra: []GPUAmount{{a100, 2}}},
		wantMsg:  "fits: at most 5 replicas at once",
	}, {
		name:   "no headroom: suggest surge-free",
		stable: &stable, cand: rev(2, twoA100, nil), target: 4,
		want: QuotaCheck{PeakReplicas: 5, Extra: []GPUAmount{{a100, 2}}, Shortfall: []GPUAmount{{a100, 2}}},
		wantMsg: "exceeds the GPU headroom: the rollout runs up to 5 replicas at once and needs 2 more NVIDIA-A100-SXM4-80GB than the project has left; " +
			"a surge-free rolling rollout fits (maxUnavailable 1)",
	}, {
		name:   "a smaller surge is preferred to none",
		stable: &stable, cand: rev(2, twoA100, func(s *RolloutSettings) { s.MaxSurge = ptr(3) }), target: 4,
		headroom: []GPUAmount{{a100, 4}},
		want:     QuotaCheck{PeakReplicas: 7, Extra: []GPUAmount{{a100, 6}}, Shortfall: []GPUAmount{{a100, 2}}},
		wantMsg:  "exceeds the GPU headroom: the rollout runs up to 7 replicas at once and needs 2 more NVIDIA-A100-SXM4-80GB than the project has left; a rolling rollout with maxSurge 2 fits",
	}, {
		name:   "blue-green doubles, the suggestion is a surge-free rolling",
		stable: &stable, cand: rev(2, twoA100, func(s *RolloutSettings) { s.Strategy = StrategyBlueGreen }), target: 3,
		headroom: []GPUAmount{{a100, 2}},
		want:     QuotaCheck{PeakReplicas: 6, Extra: []GPUAmount{{a100, 6}}, Shortfall: []GPUAmount{{a100, 4}}},
		wantMsg:  "exceeds the GPU headroom: the rollout runs up to 6 replicas at once and needs 4 more NVIDIA-A100-SXM4-80GB than the project has left; a surge-free rolling rollout fits (maxUnavailable 1)",
	}, {
		name:   "canary surges by its largest step",
		stable: &stable, cand: rev(2, twoA100, func(s *RolloutSettings) {
			s.Strategy = StrategyCanary
			s.Canary.Steps = []CanaryStep{{Weight: 25}, {Weight: 50}}
		}), target: 4,
		headroom: []GPUAmount{{a100, 4}},
		want:     QuotaCheck{PeakReplicas: 6, Extra: []GPUAmount{{a100, 4}}, Fits: true},
	}, {
		name:   "a new GPU type needs the whole target of it, even surge-free",
		stable: &stable, cand: rev(2, Resources{GPUType: h100, GPUs: 1}, func(s *RolloutSettings) { s.SurgeFree = true }), target: 4,
		headroom: []GPUAmount{{h100, 3}},
		want:     QuotaCheck{PeakReplicas: 4, Extra: []GPUAmount{{h100, 4}}, Shortfall: []GPUAmount{{h100, 1}}},
		wantMsg:  "exceeds the GPU headroom: the rollout runs up to 4 replicas at once and needs 1 more NVIDIA-H100-80GB-HBM3 than the project has left; no surge-free plan fits either",
	}, {
		name: "first revision",
		cand: rev(1, twoA100, nil), target: 2,
		headroom: []GPUAmount{{a100, 4}},
		want:     QuotaCheck{Fits: true, PeakReplicas: 2, Extra: []GPUAmount{{a100, 4}}},
	}, {
		name:   "no GPUs",
		stable: &stable, cand: rev(2, Resources{}, nil), target: 2,
		want: QuotaCheck{Fits: true, PeakReplicas: 3},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckQuota(tt.stable, tt.cand, tt.target, tt.headroom)
			sugg := got.Suggestion
			got.Suggestion = nil
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("check (-want +got):\n%s", diff)
			}
			got.Suggestion = sugg
			if tt.wantMsg != "" && got.Message() != tt.wantMsg {
				t.Errorf("message = %q\nwant      %q", got.Message(), tt.wantMsg)
			}
			if sugg != nil && !CheckQuota(tt.stable, Revision{Number: 2, Spec: withRollout(tt.cand.Spec, *sugg)}, tt.target, tt.headroom).Fits {
				t.Errorf("the suggestion %+v does not fit", *sugg)
			}
		})
	}
}

func withRollout(s EndpointSpec, r RolloutSettings) EndpointSpec {
	s.Rollout = r
	return s
}
