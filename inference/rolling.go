package inference

import "math"

// surgeLimits returns the rolling batch limits of the settings: surge-free
// rollouts never surge and must be allowed one unavailable replica.
func surgeLimits(r RolloutSettings) (surge, unavail int) {
	if r.MaxSurge != nil {
		surge = max(0, *r.MaxSurge)
	}
	if r.MaxUnavailable != nil {
		unavail = max(0, *r.MaxUnavailable)
	}
	if r.SurgeFree {
		surge, unavail = 0, max(unavail, 1)
	}
	if surge == 0 && unavail == 0 {
		surge = 1 // Validate rejects this; never deadlock on it
	}
	return surge, unavail
}

// rollingStep is one batch of a rolling replacement towards target
// candidate replicas and no stable ones, with the Deployment controller's
// rules: scale the candidate up while the total stays within target +
// surge, and scale the stable revision down, unready replicas first, while
// the ready total stays at least target − unavail. Both use the replica
// counts requested last time (s, c) and the ready counts observed since.
func rollingStep(target, surge, unavail, s, c, readyS, readyC int) (int, int) {
	readyS, readyC = min(max(readyS, 0), s), min(max(readyC, 0), c)
	if c < target {
		if room := target + surge - (s + c); room > 0 {
			c = min(target, c+room)
		}
	} else {
		c = target
	}
	removable := (s - readyS) + max(0, readyS+readyC-(target-unavail))
	s = max(0, s-removable)
	return s, c
}

// canaryReplicas is the candidate's share of target for a traffic weight:
// ⌈weight% × target⌉, at least one (a weight needs a replica to serve it)
// and at most target.
func canaryReplicas(weight, target int) int {
	return min(max(int(math.Ceil(float64(weight)*float64(target)/100)), 1), target)
}

// readyWeight is the candidate's traffic share in proportion to the ready
// replicas that stay (those being removed get no traffic), or prev when
// none is ready.
func readyWeight(s, c, readyS, readyC, prev int) int {
	rs, rc := min(max(readyS, 0), s), min(max(readyC, 0), c)
	if rs+rc == 0 {
		return prev
	}
	return int(math.Round(100 * float64(rc) / float64(rs+rc)))
}
