package layers

import (
	"fmt"
	"strings"
)

// Floor is a layer of the tree; a higher floor may import a lower one.
type Floor int

// The floors, from the bottom.
const (
	Domain Floor = iota
	Contract
	Adapters
	Workflows
	Edges
	Composition
	// Side packages stand beside the floors: dev and test harnesses,
	// examples, benchmarks and integration tests.
	Side
)

func (f Floor) String() string {
	return [...]string{"domain", "contract", "adapters", "workflows", "edges", "composition", "side"}[f]
}

// place is a folder of the module and its floor; the longest matching
// folder wins.
type place struct {
	dir   string
	floor Floor
	// reach is the highest floor it may import (for side packages and the
	// exceptions); -1 means its own floor.
	reach Floor
}

// places maps the module's folders to floors. A package in a folder not
// listed here fails the test: a new folder must be given a floor.
var places = []place{
	{"schema", Domain, Domain},
	{"runstate", Domain, Domain},
	{"pipeline", Domain, Domain},
	{"gpu", Domain, Domain},
	{"inference", Domain, Domain},
	{"internal/platform", Domain, Domain},
	{"activities", Contract, -1},
	{"internal/catalog", Contract, -1},
	{"activities/", Adapters, -1},
	{"client", Adapters, -1},
	{"internal/store", Adapters, -1},
	{"internal/vault", Adapters, -1},
	{"inference/proxy", Adapters, -1},
	{"workflows", Workflows, Contract},
	{"api", Edges, -1},
	{"internal/services", Edges, -1},
	{"cmd", Composition, -1},
	{"wire", Composition, -1},
	{"internal/process", Composition, -1},
	{"internal/stack", Side, Adapters},
	{"internal/layers", Side, Domain},
	{"examples", Side, Workflows},
	{"deploy", Side, Domain},
	{"bench", Side, Side},
	{"integration", Side, Side},
}

// placeOf finds the place of a package path relative to the module root
// ("" for the root itself).
func placeOf(rel string) (place, bool) {
	if base := rel[strings.LastIndex(rel, "/")+1:]; strings.HasSuffix(base, "test") {
		// Test support (storetest, catalogtest, kubetest, ...) serves the
		// tests: beside the floors, like them.
		return place{dir: rel, floor: Side, reach: Side}, true
	}
	best, found := place{}, false
	for _, p := range places {
		var match bool
		if strings.HasSuffix(p.dir, "/") {
			match = strings.HasPrefix(rel, p.dir) // sub-packages only
		} else {
			match = rel == p.dir || strings.HasPrefix(rel, p.dir+"/")
		}
		if match && (!found || len(p.dir) > len(best.dir)) {
			best, found = p, true
		}
	}
	return best, found
}

// Check says what is wrong with one import, from and to given relative to
// the module root; "" when it is allowed.
func Check(from, to string) string {
	pf, ok := placeOf(from)
	if !ok {
		return fmt.Sprintf("%s is in no floor: add its folder to internal/layers", from)
	}
	pt, ok := placeOf(to)
	if !ok {
		return fmt.Sprintf("%s is in no floor: add its folder to internal/layers", to)
	}
	if strings.HasPrefix(to, "examples") && !strings.HasPrefix(from, "examples") && pf.floor != Composition && pf.floor != Side {
		return fmt.Sprintf("%s (%s) imports the examples %s", from, pf.floor, to)
	}
	if pf.floor == Composition && strings.HasPrefix(to, "examples") && !strings.HasPrefix(from, "cmd") {
		return fmt.Sprintf("%s (%s) imports the examples %s: only cmd chooses them", from, pf.floor, to)
	}
	reach := pf.reach
	if reach < 0 {
		reach = pf.floor
	}
	// atelier dev runs the dev stack; the binary chooses the examples.
	allowedSide := pf.floor == Composition && (strings.HasPrefix(to, "internal/stack/") || strings.HasPrefix(from, "cmd") && strings.HasPrefix(to, "examples"))
	if (pt.floor != Side && pt.floor > reach && pt.floor != pf.floor) || (pt.floor == Side && pf.floor != Side && !allowedSide) {
		return fmt.Sprintf("%s (%s, may import up to %s) imports %s (%s)", from, pf.floor, reach, to, pt.floor)
	}
	// Workflow code reaches the world only through activities: the
	// workflows floor imports the contract and the domain, and itself.
	if pf.floor == Workflows && pt.floor == Adapters {
		return fmt.Sprintf("%s (workflow code) imports the adapter %s", from, to)
	}
	return ""
}
