package imports

import "time"

// SetStall shortens how long a download may read nothing, for tests.
func (a *Activities) SetStall(d time.Duration) { a.stall = d }
