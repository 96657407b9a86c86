package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// The clusters page in a real browser against a real stack with a
// Kubernetes control plane (kwok GPU nodes): the project's quota is two
// L4s, two one-L4 steps hold them and a third waits. The page shows the
// waiting step first, with its position, the GPUs it asks, the reason it
// waits (Quota) and the admission's message, linked to its run; the
// registered cluster with its L4 capacity; the project's quota and the
// two L4s in use. The cluster's page shows the same queue, pending and
// running. Once a holder is cancelled, the waiting step is admitted and
// the refreshing pages show it running. Any script error or CSP violation
// fails the test.
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-clusters.png and
// ui-cluster-queue.png (see
// TestWebUIRunPageInBrowser).
func TestWebUIClustersInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server, a Kubernetes control plane and Chromium")
	}
	path := chromiumPath(t)
	e := newKubeEnv(t, func(string) kubetest.Exit {
		return kubetest.Exit{After: 5 * time.Minute, Message: `{}`}
	}, true)
	ctx := context.Background()
	e.setupL4Admission(t, "one-l4", 0)
	running := func(r gen.Run) bool {
		return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateRUNNING
	}
	a := e.start("one-l4", nil)
	b := e.start("one-l4", nil)
	e.waitRun(a, 60*time.Second, "admitted and running", running)
	e.waitRun(b, 60*time.Second, "admitted and running", running)
	c := e.start("one-l4", nil)
	e.waitRun(c, 60*time.Second, "waiting for GPUs", func(r gen.Run) bool {
		return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateWAITINGFORGPU
	})
	// What REST says, which the page must show.
	var pending gen.QueueEntry
	require.Eventually(t, func() bool {
		res, err := e.client().GetClusterQueueWithResponse(ctx, e.cluster)
		require.NoError(t, err)
		if res.JSON200 == nil || len(res.JSON200.Pending) != 1 || val(res.JSON200.Pending[0].Message) == "" {
			return false
		}
		pending = res.JSON200.Pending[0]
		return true
	}, 60*time.Second, 200*time.Millisecond, "the third run never showed in the queue")
	require.Equal(t, c, val(pending.Run))
	require.Equal(t, string(gpu.WaitQuota), val(pending.Reason))
	cl, err := e.client().GetClusterWithResponse(ctx, e.cluster)
	require.NoError(t, err)
	require.NotNil(t, cl.JSON200.Capacity)
	l4 := cl.JSON200.Capacity.Gpus[kubetest.L4]
	require.Equal(t, int64(2), l4.Total, "the fleet's two one-L4 nodes")

	br := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	br.signIn(t, e.url, e.token)
	waitingRow := fmt.Sprintf(`#waiting-steps tr[data-run=%q]`, c)
	br.run(t, "open the clusters page from the nav",
		chromedp.Click(`#nav-clusters`, chromedp.ByQuery),
		chromedp.WaitVisible(waitingRow, chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`#clusters tr[data-cluster=%q]`, e.cluster), chromedp.ByQuery),
		chromedp.WaitVisible(`.quota[data-project="`+e.project+`"] tr[data-resource="`+kubetest.L4+`"][data-used="2"]`, chromedp.ByQuery),
	)
	var waiting struct {
		Step, Cluster, Reason, Position, PositionText, Asks, RunHref, Why, Message string
		Rows                                                                       int
	}
	br.run(t, "read the waiting step", chromedp.Evaluate(`(() => {
		const tr = document.querySelector(`+"`"+waitingRow+"`"+`);
		const td = tr.querySelectorAll("td");
		return {
			step: tr.dataset.step, cluster: tr.dataset.cluster, reason: tr.dataset.reason, position: tr.dataset.position,
			positionText: td[0].querySelector(".position").textContent,
			asks: td[3].childNodes[0].textContent,
			runHref: td[1].querySelector("a").getAttribute("href"),
			why: td[5].querySelector(".reason").textContent,
			message: td[5].querySelector(".why-message").textContent.trim(),
			rows: document.querySelectorAll("#waiting-steps tbody tr").length,
		};
	})()`, &waiting))
	assert.Equal(t, 1, waiting.Rows)
	assert.Equal(t, "train", waiting.Step)
	assert.Equal(t, e.cluster, waiting.Cluster)
	assert.Equal(t, "Quota", waiting.Reason)
	assert.Equal(t, "Quota", waiting.Why)
	assert.Equal(t, "1", waiting.Position)
	assert.Equal(t, "#1", waiting.PositionText)
	assert.Equal(t, "1 × "+kubetest.L4, waiting.Asks)
	assert.Equal(t, "#/p/"+e.project+"/runs/"+c+"/steps/train", waiting.RunHref)
	assert.Equal(t, val(pending.Message), waiting.Message, "the admission's own words")

	var overview struct {
		GPU, Free, Queue         string
		Used, Nominal, Available string
	}
	br.run(t, "read the cluster, the quota and the inventory", chromedp.Evaluate(`(() => {
		const tr = document.querySelector(`+"`"+fmt.Sprintf(`#clusters tr[data-cluster=%q]`, e.cluster)+"`"+`);
		const li = tr.querySelector(`+"`"+fmt.Sprintf(`li[data-gpu=%q]`, kubetest.L4)+"`"+`);
		const q = document.querySelector(`+"`"+`.quota[data-project="`+e.project+`"] tr[data-resource="`+kubetest.L4+`"]`+"`"+`);
		return {
			gpu: li.querySelector(".gpu-type").textContent,
			free: li.querySelector(".gpu-nums").textContent,
			queue: tr.querySelector(".queue-summary").textContent,
			used: q.querySelector(".used").textContent,
			nominal: q.dataset.nominal,
			available: document.querySelector(`+"`"+fmt.Sprintf(`#gpus tr[data-gpu=%q] .available`, kubetest.L4)+"`"+`).textContent,
		};
	})()`, &overview))
	assert.Equal(t, kubetest.L4, overview.GPU)
	assert.Regexp(t, `^\d free · \d used · 2 total$`, overview.Free, "as the worker last reported")
	assert.Equal(t, "1 pending · 2 running", overview.Queue)
	assert.Equal(t, "2 of 2", overview.Used, "the two admitted steps hold the whole quota")
	assert.Equal(t, "2", overview.Nominal)
	// The worker reports capacity every 30 s: the refreshing page shows the
	// two holders' L4s used once it has.
	br.run(t, "the next capacity report shows the L4s used",
		chromedp.Poll(`document.querySelector(`+"`"+fmt.Sprintf(`#clusters tr[data-cluster=%q] li[data-gpu=%q] .gpu-nums`, e.cluster, kubetest.L4)+"`"+`)?.textContent === "0 free · 2 used · 2 total"`,
			nil, chromedp.WithPollingTimeout(75*time.Second)),
	)
	if shots != "" {
		br.screenshot(t, filepath.Join(shots, "ui-clusters.png"))
	}

	// The waiting step's link opens its run at the step, whose drawer
	// links back to the queue.
	br.run(t, "follow the waiting step to its run, and back",
		chromedp.Click(waitingRow+` td:nth-child(2) a`, chromedp.ByQuery),
		chromedp.WaitVisible(`g.node[data-step="train"][data-state="WAITING_FOR_GPU"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#drawer #gpu-queue-link`, chromedp.ByQuery),
		chromedp.Click(`#drawer #gpu-queue-link`, chromedp.ByQuery),
		chromedp.WaitVisible(waitingRow, chromedp.ByQuery),
	)

	// The cluster's page: the whole queue.
	br.run(t, "open the cluster's page",
		chromedp.WaitVisible(fmt.Sprintf(`#clusters tr[data-cluster=%q] a.cluster-name`, e.cluster), chromedp.ByQuery),
		chromedp.Click(fmt.Sprintf(`#clusters tr[data-cluster=%q] a.cluster-name`, e.cluster), chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`#pending tr[data-run=%q][data-reason="Quota"][data-position="1"]`, c), chromedp.ByQuery),
	)
	var queue struct {
		Hash             string
		Running          []string
		Capacity         []string
		PendingProject   string
		PendingAsks, Why string
	}
	br.run(t, "read the queue", chromedp.Evaluate(`(() => {
		const p = document.querySelector("#pending tbody tr");
		const td = p.querySelectorAll("td");
		const cap = document.querySelector(`+"`"+fmt.Sprintf(`#capacity tr[data-gpu=%q]`, kubetest.L4)+"`"+`);
		return {
			hash: location.hash,
			running: [...document.querySelectorAll("#running tbody tr")].map(tr => tr.dataset.run).sort(),
			capacity: [...cap.querySelectorAll("td.free, td.used, td.total, td.admitted")].map(td => td.textContent),
			pendingProject: td[2].textContent,
			pendingAsks: td[3].textContent,
			why: td[6].querySelector(".reason").textContent,
		};
	})()`, &queue))
	assert.Equal(t, "#/p/"+e.project+"/clusters/"+e.cluster, queue.Hash)
	want := []string{a, b}
	if b < a {
		want = []string{b, a}
	}
	assert.Equal(t, want, queue.Running)
	assert.Equal(t, []string{"0", "2", "2", "2"}, queue.Capacity, "L4: free, used (at the last report), total, admitted")
	assert.Equal(t, e.project, queue.PendingProject)
	assert.Equal(t, "1 × "+kubetest.L4, queue.PendingAsks)
	assert.Equal(t, "Quota", queue.Why)
	if shots != "" {
		br.screenshot(t, filepath.Join(shots, "ui-cluster-queue.png"))
	}

	// A holder ends: the waiting step is admitted, and the refreshing page
	// shows it running and nothing pending.
	e.cancel(a, "make room")
	br.run(t, "the waiting step is admitted",
		chromedp.WaitVisible(fmt.Sprintf(`#running tr[data-run=%q]`, c), chromedp.ByQuery),
		chromedp.WaitVisible(`#no-pending`, chromedp.ByQuery),
	)
	e.waitRun(c, 60*time.Second, "admitted and running", running)
	br.run(t, "nothing of the project waits any more",
		chromedp.Navigate(e.url+"/ui/#/p/"+e.project+"/clusters"),
		chromedp.WaitVisible(`#no-waiting`, chromedp.ByQuery),
		br.waitText(fmt.Sprintf(`#clusters tr[data-cluster=%q] .queue-summary`, e.cluster), "0 pending · 2 running"),
	)
	br.noPageErrors(t)
	for _, id := range []string{b, c} {
		e.cancel(id, "done")
		assert.Equal(t, gen.RunStateCANCELLED, e.waitTerminal(id, 60*time.Second).State)
	}
}
