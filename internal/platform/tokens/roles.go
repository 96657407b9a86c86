package tokens

// Role grants what a token may do. Admin tokens are not bound to a project.
type Role string

// Roles, from most to least privileged.
const (
	RoleAdmin  Role = "admin"  // every project; manage projects and tokens
	RoleEditor Role = "editor" // one project: create pipelines, start and cancel runs
	RoleViewer Role = "viewer" // one project: read only
)

// Roles are the role names, least privileged first. The pipeline language
// names them too (an approval step's minRole and approvers), and approval
// rules are checked inside workflow code: this package imports nothing of
// Atelier so that both may use it.
var Roles = []string{string(RoleViewer), string(RoleEditor), string(RoleAdmin)}

// Rank orders role names (viewer 1, editor 2, admin 3); 0 for an unknown
// one. Token checks and approval rules share it.
func Rank(role string) int {
	for i, r := range Roles {
		if r == role {
			return i + 1
		}
	}
	return 0
}

// rank orders roles; unknown roles rank below every real one.
func rank(r Role) int { return Rank(string(r)) }

// Allows reports whether a token with role have may do what needs role need.
// Admin implies editor implies viewer. Project scoping is checked separately:
// admin tokens reach every project, others only their own.
func Allows(have, need Role) bool {
	return rank(have) > 0 && rank(have) >= rank(need)
}

// Valid reports whether r is one of the known roles.
func Valid(r Role) bool { return rank(r) > 0 }
