package gpu

import (
	"fmt"

	"github.com/atelier-ml/atelier/schema"
)

// ValidateWorkload checks what Schedule would reject as WaitInvalid,
// except duplicate IDs: the project exists in the policy, the priority
// (or the project's default) lies in the project's range, and the gang
// requests something. Use it to refuse a submission up front; the errors
// wrap the sentinel errors (errors.Is).
func ValidateWorkload(p Policy, w Workload) error {
	var pp *ProjectPolicy
	for i := range p.Projects {
		if p.Projects[i].Name == w.Project {
			pp = &p.Projects[i]
			break
		}
	}
	if pp == nil {
		return fmt.Errorf("%w: %q", ErrUnknownProject, w.Project)
	}
	if err := validateGang(&w); err != nil {
		return err
	}
	if b := basePriority(pp, &w); b < pp.MinPriority || b > pp.MaxPriority {
		return fmt.Errorf("%w: %d not in [%d, %d] for project %q", ErrPriorityOutOfRange, b, pp.MinPriority, pp.MaxPriority, pp.Name)
	}
	return nil
}

// Bounds on what a policy may say: generous, but small enough that the
// scheduler's arithmetic cannot overflow and a typo is caught.
const (
	MaxQuotaUnits  = 1 << 20
	MaxPriority    = 1_000_000
	maxQuotas      = 64
	maxNameLength  = 63
	maxWeightValue = 1000
)

// Problems returns everything wrong with a project's policy (nil when it
// is valid). The project name itself is the caller's to check.
func (p ProjectPolicy) Problems() []schema.Problem {
	var out []schema.Problem
	add := func(path, format string, args ...any) {
		out = append(out, schema.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if p.Cohort != "" && !validName(p.Cohort) {
		add("cohort", "must be a lowercase name of at most %d characters (letters, digits, '-')", maxNameLength)
	}
	if p.Weight < 0 || p.Weight > maxWeightValue || p.Weight != p.Weight {
		add("weight", "must be between 0 and %d (0 means 1)", maxWeightValue)
	}
	for _, f := range []struct {
		path string
		v    int
	}{{"minPriority", p.MinPriority}, {"maxPriority", p.MaxPriority}, {"defaultPriority", p.DefaultPriority}} {
		if f.v < -MaxPriority || f.v > MaxPriority {
			add(f.path, "must be between %d and %d", -MaxPriority, MaxPriority)
		}
	}
	if p.MinPriority > p.MaxPriority {
		add("minPriority", "must not exceed maxPriority (%d)", p.MaxPriority)
	} else if p.DefaultPriority < p.MinPriority || p.DefaultPriority > p.MaxPriority {
		add("defaultPriority", "must lie in [minPriority, maxPriority] = [%d, %d]", p.MinPriority, p.MaxPriority)
	}
	if len(p.Quotas) > maxQuotas {
		add("quotas", "at most %d quotas per project", maxQuotas)
	}
	seen := make(map[Resource]int, len(p.Quotas))
	for i, q := range p.Quotas {
		at := fmt.Sprintf("quotas[%d]", i)
		switch {
		case q.Resource == "":
			add(at+".resource", "required: a GPU product (as in the node label %s) or a MIG resource (%s<profile>)", LabelGPUProduct, ResourceMIGPrefix)
		case len(q.Resource) > 253:
			add(at+".resource", "at most 253 characters")
		}
		if j, dup := seen[q.Resource]; dup && q.Resource != "" {
			add(at+".resource", "%q already has a quota at quotas[%d]", q.Resource, j)
		}
		seen[q.Resource] = i
		if q.Nominal < 0 || q.Nominal > MaxQuotaUnits {
			add(at+".nominal", "must be between 0 and %d", MaxQuotaUnits)
		}
		for _, l := range []struct {
			path string
			v    Limit
		}{{"borrowingLimit", q.BorrowingLimit}, {"lendingLimit", q.LendingLimit}} {
			if l.v < Unlimited || l.v > MaxQuotaUnits {
				add(at+"."+l.path, "must be -1 (unlimited) or between 0 and %d", MaxQuotaUnits)
			}
		}
		if q.Nominal >= 0 && q.LendingLimit > Limit(q.Nominal) {
			add(at+".lendingLimit", "cannot lend more than the nominal quota (%d); -1 lends all of it", q.Nominal)
		}
	}
	return out
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > maxNameLength || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
