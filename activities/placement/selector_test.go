package placement

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
)

type fakeRegistry struct {
	clusters []catalog.Cluster
	err      error
}

func (f fakeRegistry) ListClusters(context.Context) ([]catalog.Cluster, error) {
	return f.clusters, f.err
}

func selectCluster(t *testing.T, reg ClusterReader, req activities.SelectClusterRequest) (activities.SelectClusterResult, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	New(reg, func() time.Time { return now }, nil).Register(env)
	v, err := env.ExecuteActivity(activities.SelectClusterName, req)
	if err != nil {
		return activities.SelectClusterResult{}, err
	}
	var res activities.SelectClusterResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res, nil
}

func TestSelectClusterActivity(t *testing.T) {
	reg := fakeRegistry{clusters: []catalog.Cluster{
		mk("east", time.Second, 0, map[string]string{"tier": "gpu"}, map[string]int64{a100: 1}),
		mk("west", time.Second, 0, map[string]string{"tier": "gpu"}, map[string]int64{a100: 3}),
	}}
	res, err := selectCluster(t, reg, req("train", &pipeline.Placement{Selector: map[string]string{"tier": "gpu"}}, 1, a100))
	if err != nil {
		t.Fatal(err)
	}
	if res.Cluster != "west" || res.TaskQueue != "atelier-k8s-west" || res.Reason == "" {
		t.Fatalf("%+v", res)
	}
}

func TestSelectClusterNoClusterIsNonRetryable(t *testing.T) {
	_, err := selectCluster(t, fakeRegistry{}, req("train", &pipeline.Placement{Cluster: "east"}, 0, ""))
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != activities.ErrTypeNoCluster || !appErr.NonRetryable() {
		t.Fatalf("want non-retryable %s, got %v", activities.ErrTypeNoCluster, err)
	}
	if !strings.Contains(appErr.Error(), `cluster "east"`) {
		t.Errorf("message %q", appErr.Error())
	}
}

func TestSelectClusterRegistryErrorIsRetryable(t *testing.T) {
	_, err := selectCluster(t, fakeRegistry{err: errors.New("connection refused")}, req("train", nil, 0, ""))
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.NonRetryable() || appErr.Type() == activities.ErrTypeNoCluster {
		t.Fatalf("want a retryable error, got %v", err)
	}
}

// A batch answers each request on its own: one that nothing matches gets
// its reason, the others their cluster.
func TestSelectClustersActivity(t *testing.T) {
	reg := fakeRegistry{clusters: []catalog.Cluster{
		mk("east", time.Second, 0, map[string]string{"tier": "gpu"}, map[string]int64{a100: 1}),
		mk("west", time.Second, 0, map[string]string{"tier": "gpu"}, map[string]int64{a100: 3}),
	}}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	New(reg, func() time.Time { return now }, nil).Register(env)
	v, err := env.ExecuteActivity(activities.SelectClustersName, activities.SelectClustersRequest{Requests: []activities.SelectClusterRequest{
		req("train", &pipeline.Placement{Selector: map[string]string{"tier": "gpu"}}, 1, a100),
		req("eval", &pipeline.Placement{Cluster: "north"}, 0, ""),
		req("serve", &pipeline.Placement{Cluster: "east"}, 0, ""),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var res activities.SelectClustersResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 3 || res.Results[0].Cluster != "west" || res.Results[2].Cluster != "east" {
		t.Fatalf("%+v", res)
	}
	if r := res.Results[1]; r.Cluster != "" || !strings.Contains(r.NoCluster, `cluster "north"`) {
		t.Errorf("no cluster: %+v", r)
	}

	env = s.NewTestActivityEnvironment()
	New(fakeRegistry{err: errors.New("connection refused")}, nil, nil).Register(env)
	_, err = env.ExecuteActivity(activities.SelectClustersName, activities.SelectClustersRequest{Requests: []activities.SelectClusterRequest{req("train", nil, 0, "")}})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.NonRetryable() {
		t.Fatalf("a registry error is retryable, got %v", err)
	}
}
