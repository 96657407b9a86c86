package endpointclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference/proxy"
)

// Resolve answers the endpoint proxy's route from the endpoint's status:
// every observed revision with its ready replicas' URLs and its applied
// traffic weight (0 for a revision that is only previewed).
func (e *Client) Resolve(ctx context.Context, project, name string) (proxy.Route, error) {
	st, err := e.Status(ctx, project, name)
	if errors.Is(err, ErrNotFound) {
		return proxy.Route{}, proxy.ErrNotFound
	}
	if err != nil {
		return proxy.Route{}, err
	}
	var r proxy.Route
	for _, o := range st.Observed {
		t := proxy.Target{Revision: o.Revision, URLs: o.URLs}
		for _, w := range st.Traffic {
			if w.Revision == o.Revision {
				t.Weight = w.Weight
			}
		}
		r.Targets = append(r.Targets, t)
	}
	return r, nil
}

// Report signals the proxy's figures to the endpoint's workflow. An
// endpoint deleted meanwhile is not an error: nobody needs its figures.
func (e *Client) Report(ctx context.Context, project, name string, r proxy.Report) error {
	err := e.c.SignalWorkflow(ctx, activities.EndpointWorkflowID(project, name), "", activities.SignalEndpointTraffic,
		activities.EndpointTraffic{Held: r.Held, Revisions: r.Revisions})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("endpointclient: report traffic of %s/%s: %w", project, name, err)
	}
	return nil
}

var (
	_ proxy.Resolver = (*Client)(nil)
	_ proxy.Reporter = (*Client)(nil)
)
