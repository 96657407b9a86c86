package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// The model registry pages in a real browser against a real stack. Two
// runs of a training pipeline whose output declares `register: sentiment`
// make versions 1 and 2; alias candidate names version 2 and an endpoint
// on the local runtime (examples/modelserver standing in for vLLM)
// follows sentiment@candidate. Then, signed in as an editor:
//   - Models (in the nav) lists the model with its latest version and its
//     aliases;
//   - New model… creates reviews, after the gateway's refusals of a bad
//     name (422) and a taken one (409) are shown at the name field; its
//     page offers Register a version… open, which says what cannot be
//     sent (no artifact, metadata that is not an object) at the fields,
//     shows the gateway's 422 for an unknown artifact and 404 for an
//     unknown run at theirs, lists the first run's outputs and registers
//     its model (format and metadata kept: REST agrees) as version 1;
//     registering it again changes nothing; champion is pointed at it
//     and the list shows reviews with champion → v1;
//   - its page shows both versions, newest first, each linked to the run
//     and step that wrote its artifact; the aliases, with the endpoint
//     that follows candidate; and the endpoint serving version 2;
//   - the alias form says which endpoint follows the alias typed, shows
//     the gateway's refusal of a bad alias name at the field, and points
//     champion at version 1: the aliases and the alias history show it;
//   - deleting version 1 shows the gateway's 409, which names champion;
//     once champion is removed (recorded in the history), version 1 is
//     deleted and gone from the page and from REST;
//   - the endpoint's page shows its reference, the version it serves
//     (linked back to the model's page) and that it follows the alias.
//
// A model that does not exist shows the gateway's 404. A viewer reads the
// model's page without the forms, Remove or Delete, and the list without
// New model…. Any script error or CSP violation fails the test (but the
// refused alias name's 400, the refused deletion's 409, the missing
// model's 404s and the refusals of the new model's and the registration's
// forms).
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-models.png (see
// TestWebUIRunPageInBrowser).
func TestWebUIModelsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	engine := modelserverBinary(t)
	s := newStack(t, stackOptions{localEngines: map[string]string{"vllm": engine}})
	s.cleanupEndpoint(t)
	ctx := context.Background()

	// Each run's model.bin is the next version of sentiment.
	s.createPipeline("train-sentiment", trainSentimentPipeline)
	var runs [2]gen.Run
	var artifacts [2]gen.Artifact
	for i, seed := range []string{"a", "b"} {
		runs[i] = s.waitTerminal(s.start("train-sentiment", map[string]any{"seed": seed}), time.Minute)
		require.Equal(t, gen.RunStateSUCCEEDED, runs[i].State, "%s", val(runs[i].Status.Error))
		artifacts[i] = val(stepByName(runs[i], "train").Artifacts)[0]
	}
	require.Eventually(t, func() bool {
		code, _ := s.raw("GET", s.path("/models/sentiment/versions/2"), nil)
		return code == 200
	}, 10*time.Second, 100*time.Millisecond, "both runs registered a version")
	code, body := s.raw("PUT", s.path("/models/sentiment/aliases/candidate"), []byte(`{"version": 2}`))
	require.Equal(t, 200, code, "%s", body)
	s.createEndpoint(t, "", map[string]any{"backend": "vllm", "model": map[string]any{"ref": "sentiment@candidate", "follow": true},
		"image": "vllm/vllm-openai:v0.9.1", "args": []string{"--startup-delay", "200ms"}, "replicas": map[string]any{"min": 1, "max": 1},
		"rollout": map[string]any{"gates": map[string]any{"maxErrorRate": 1, "analysisInterval": "1s"}}})
	s.waitEndpoint(t, 90*time.Second, "served revision 1", servedBy(1))

	br := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	modelHash := "#/p/" + s.project + "/models/sentiment"
	br.signIn(t, s.url, s.token)

	// The list.
	type listedModel struct {
		Latest, Href, By string
		Aliases          []string
	}
	readList := func() map[string]listedModel {
		t.Helper()
		var out map[string]listedModel
		br.run(t, "read the models", chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("#models tbody tr")].map(tr => {
			const td = tr.querySelectorAll("td");
			return [tr.dataset.model, {latest: td[1].textContent, href: td[0].querySelector("a").getAttribute("href"), by: td[5].textContent,
				aliases: [...td[2].querySelectorAll(".chip")].map(c => c.textContent)}];
		}))`, &out))
		return out
	}
	br.run(t, "open Models from the nav",
		chromedp.Click(`#nav-models`, chromedp.ByQuery),
		chromedp.WaitVisible(`#models tr[data-model="sentiment"]`, chromedp.ByQuery),
	)
	assert.Equal(t, map[string]listedModel{"sentiment": {"v2", modelHash, "run " + runs[0].Id, []string{"candidate → v2"}}}, readList(),
		"the first run's registration created the model; the list carries its aliases")

	// A new model: the gateway's refusals at the name field, then made.
	var nameError, newFormError, nameHint string
	br.run(t, "a model name the gateway refuses",
		chromedp.Click(`#new-model`, chromedp.ByQuery),
		chromedp.WaitVisible(`#new-model-form`, chromedp.ByQuery),
		chromedp.SendKeys(`#new-model-name`, "Reviews", chromedp.ByQuery),
		chromedp.Click(`#create-model`, chromedp.ByQuery),
		chromedp.WaitVisible(`#new-model-name-error`, chromedp.ByQuery),
		chromedp.Text(`#new-model-name-error`, &nameError, chromedp.ByQuery),
		chromedp.Text(`#new-model-form-error`, &newFormError, chromedp.ByQuery),
	)
	assert.Contains(t, nameError, "lowercase letters, digits")
	assert.Contains(t, newFormError, "(HTTP 422): see the fields marked above")
	br.run(t, "a model name taken",
		clearField(`#new-model-name`),
		chromedp.SendKeys(`#new-model-name`, "sentiment", chromedp.ByQuery),
		chromedp.WaitNotVisible(`#new-model-name-error`, chromedp.ByQuery),
		chromedp.Text(`#new-model-hint`, &nameHint, chromedp.ByQuery),
		chromedp.Click(`#create-model`, chromedp.ByQuery),
		chromedp.WaitVisible(`#new-model-name-error`, chromedp.ByQuery),
		chromedp.Text(`#new-model-name-error`, &nameError, chromedp.ByQuery),
	)
	assert.Equal(t, "sentiment exists already (latest version 2): register versions on its page.", nameHint)
	assert.Contains(t, nameError, "model sentiment already exists")
	assert.Contains(t, nameError, "(HTTP 409)")
	var created string
	br.run(t, "create reviews",
		clearField(`#new-model-name`),
		chromedp.SendKeys(`#new-model-name`, "reviews", chromedp.ByQuery),
		chromedp.SendKeys(`#new-model-description`, "sentiment of product reviews", chromedp.ByQuery),
		chromedp.Click(`#create-model`, chromedp.ByQuery),
		chromedp.WaitVisible(`#model-created`, chromedp.ByQuery),
		chromedp.Text(`#model-created`, &created, chromedp.ByQuery),
		chromedp.WaitVisible(`#models tr[data-model="reviews"]`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#new-model-form`, chromedp.ByQuery),
	)
	assert.Contains(t, created, "Created the model reviews.")
	assert.Equal(t, listedModel{"no version", modelHash[:len(modelHash)-len("sentiment")] + "reviews", "ci-editor", []string{}}, readList()["reviews"])

	// Its page offers the register form at once; what cannot be sent is
	// said at the fields, and so are the gateway's refusals.
	var artifactError, metadataError, runError string
	br.run(t, "open reviews; send nothing to register",
		chromedp.Click(`#model-created a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#register-form`, chromedp.ByQuery),
		chromedp.WaitVisible(`#no-versions`, chromedp.ByQuery),
		chromedp.SendKeys(`#register-metadata`, `["not", "an object"]`, chromedp.ByQuery),
		chromedp.Click(`#register-submit`, chromedp.ByQuery),
		chromedp.WaitVisible(`#register-metadata-error`, chromedp.ByQuery),
		chromedp.Text(`#register-artifact-error`, &artifactError, chromedp.ByQuery),
		chromedp.Text(`#register-metadata-error`, &metadataError, chromedp.ByQuery),
	)
	assert.Equal(t, "Choose a run's output, or give an artifact ID.", artifactError)
	assert.Contains(t, metadataError, "not a JSON object")
	br.run(t, "an artifact the project does not have",
		clearField(`#register-metadata`),
		chromedp.SendKeys(`#register-metadata`, `{"source": "ui"}`, chromedp.ByQuery),
		chromedp.SendKeys(`#register-artifact`, "0123456789abcdef0123456789abcdef", chromedp.ByQuery),
		chromedp.Click(`#register-submit`, chromedp.ByQuery),
		chromedp.WaitVisible(`#register-artifact-error`, chromedp.ByQuery),
		chromedp.Text(`#register-artifact-error`, &artifactError, chromedp.ByQuery),
		chromedp.Text(`#register-form-error`, &newFormError, chromedp.ByQuery),
	)
	assert.Equal(t, "no artifact with this ID in the project", artifactError)
	assert.Contains(t, newFormError, "(HTTP 422)")
	br.run(t, "a run that does not exist",
		chromedp.SendKeys(`#register-run`, "nope", chromedp.ByQuery),
		chromedp.Click(`#register-list`, chromedp.ByQuery),
		chromedp.WaitVisible(`#register-run-error`, chromedp.ByQuery),
		chromedp.Text(`#register-run-error`, &runError, chromedp.ByQuery),
	)
	assert.Contains(t, runError, "Listing the outputs of nope refused:")
	assert.Contains(t, runError, "(HTTP 404)")
	var picked struct{ Artifact, Output, About string }
	br.run(t, "list the first run's outputs",
		clearField(`#register-run`),
		chromedp.SendKeys(`#register-run`, runs[0].Id, chromedp.ByQuery),
		chromedp.Click(`#register-list`, chromedp.ByQuery),
		chromedp.WaitVisible(`#register-output`, chromedp.ByQuery),
		chromedp.Evaluate(`({artifact: document.querySelector("#register-artifact").value,
			output: document.querySelector("#register-output").selectedOptions[0].textContent,
			about: document.querySelector("#register-about").textContent})`, &picked),
	)
	assert.Equal(t, artifacts[0].Id, picked.Artifact, "the run's model output is chosen")
	assert.True(t, strings.HasPrefix(picked.Output, "train · model · model · 9 B · sha256:"), picked.Output)
	assert.Equal(t, "Step train of run "+runs[0].Id+" wrote model (model, 9 B, "+picked.Output[len("train · model · model · 9 B · "):]+"). Registering makes it the next version of reviews.", picked.About)
	var registered string
	br.run(t, "register it",
		chromedp.SendKeys(`#register-format`, "vllm", chromedp.ByQuery),
		chromedp.Click(`#register-submit`, chromedp.ByQuery),
		chromedp.WaitVisible(`#version-registered`, chromedp.ByQuery),
		chromedp.Text(`#version-registered`, &registered, chromedp.ByQuery),
		chromedp.WaitVisible(`#versions tr[data-version="1"]`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#register-form`, chromedp.ByQuery),
	)
	assert.Equal(t, "Registered the artifact "+artifacts[0].Id[:12]+"… (train of run "+runs[0].Id+") as version 1 of reviews.", registered)
	var reviewsVersion struct{ Artifact, Format, By string }
	br.run(t, "read reviews' version", chromedp.Evaluate(`(() => {
		const tr = document.querySelector('#versions tr[data-version="1"]'), td = tr.querySelectorAll("td");
		return {artifact: td[2].querySelector("a").dataset.artifact, format: td[0].querySelector(".pill").textContent, by: td[7].textContent};
	})()`, &reviewsVersion))
	assert.Equal(t, struct{ Artifact, Format, By string }{artifacts[0].Id, "vllm", "ci-editor"}, reviewsVersion)
	vres, err := s.client().GetModelVersionWithResponse(ctx, s.project, "reviews", "1")
	require.NoError(t, err)
	require.NotNil(t, vres.JSON200, "%s", vres.Body)
	assert.Equal(t, map[string]any{"source": "ui"}, vres.JSON200.Metadata, "REST agrees")
	assert.Equal(t, "vllm", vres.JSON200.Format)
	br.run(t, "register it again",
		chromedp.Click(`#open-register`, chromedp.ByQuery),
		chromedp.WaitVisible(`#register-form`, chromedp.ByQuery),
		chromedp.SendKeys(`#register-artifact`, artifacts[0].Id, chromedp.ByQuery),
		br.waitText(`#register-about`, "It already is version 1 of reviews: registering it again changes nothing."),
		chromedp.Click(`#register-submit`, chromedp.ByQuery),
		br.waitText(`#version-registered`, "already is version 1 of reviews: nothing changed."),
	)
	br.run(t, "point champion at reviews' version 1; back to the list",
		chromedp.SendKeys(`#alias-name`, "champion", chromedp.ByQuery),
		chromedp.Click(`#set-alias`, chromedp.ByQuery),
		chromedp.WaitVisible(`#aliases tr[data-alias="champion"][data-version="1"]`, chromedp.ByQuery),
		chromedp.Click(`a.button[href$="/models"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#models tr[data-model="reviews"] .chip[data-alias="champion"]`, chromedp.ByQuery),
	)
	assert.Equal(t, map[string]listedModel{
		"reviews":   {"v1", modelHash[:len(modelHash)-len("sentiment")] + "reviews", "ci-editor", []string{"champion → v1"}},
		"sentiment": {"v2", modelHash, "run " + runs[0].Id, []string{"candidate → v2"}},
	}, readList(), "each model with its aliases")

	// The model's page.
	br.run(t, "open the model",
		chromedp.Click(`#models tr[data-model="sentiment"] a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#versions tr[data-version="1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#model-endpoints tr[data-endpoint="chat"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#alias-events tr[data-alias="candidate"]`, chromedp.ByQuery),
	)
	type versionRow struct {
		Version, Aliases, Artifact, ArtifactHref, Size, Run, RunHref, Step, By string
		Delete                                                                 bool
	}
	readVersions := func() []versionRow {
		t.Helper()
		var out []versionRow
		br.run(t, "read the versions", chromedp.Evaluate(`[...document.querySelectorAll("#versions tbody tr")].map(tr => {
			const td = tr.querySelectorAll("td");
			return {
				version: tr.dataset.version,
				aliases: [...td[1].querySelectorAll(".chip")].map(c => c.textContent).join(","),
				artifact: td[2].querySelector("a").dataset.artifact,
				artifactHref: td[2].querySelector("a").getAttribute("href"),
				size: td[3].textContent,
				run: td[4].textContent,
				runHref: td[4].querySelector("a").getAttribute("href"),
				step: td[5].textContent,
				by: td[7].textContent,
				delete: !!tr.querySelector("button.delete-version"),
			};
		})`, &out))
		return out
	}
	row := func(i int, aliases string) versionRow {
		r := runs[i]
		return versionRow{Version: fmt.Sprint(i + 1), Aliases: aliases, Artifact: artifacts[i].Id,
			ArtifactHref: "#/p/" + s.project + "/runs/" + r.Id + "/steps/train", Size: "9 B",
			Run: r.Id, RunHref: "#/p/" + s.project + "/runs/" + r.Id, Step: "train · attempt 1", By: "its run", Delete: true}
	}
	assert.Equal(t, []versionRow{row(1, "candidate"), row(0, "")}, readVersions(), "newest first, each linked to the step that wrote it")
	aliases := func() map[string]string {
		t.Helper()
		var out map[string]string
		br.run(t, "read the aliases", chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("#aliases tbody tr")].map(tr =>
			[tr.dataset.alias, tr.querySelector(".alias-version").textContent + " followed by " + tr.children[2].textContent]))`, &out))
		return out
	}
	assert.Equal(t, map[string]string{"candidate": "v2 followed by chat"}, aliases())
	var serving []string
	br.run(t, "read the endpoints", chromedp.Evaluate(`[...document.querySelectorAll("#model-endpoints tbody tr")].map(tr =>
		[...tr.children].map(td => td.textContent).join(" | "))`, &serving))
	assert.Equal(t, []string{"chat | r1 | stable | v2 | sentiment@candidate | yes"}, serving)

	// The form: who follows the alias typed; a name the gateway refuses.
	var hint, fieldError, formError string
	br.run(t, "type an alias an endpoint follows",
		chromedp.SendKeys(`#alias-name`, "candidate", chromedp.ByQuery),
		br.waitText(`#alias-followers`, "Endpoint chat follows candidate"),
		chromedp.Text(`#alias-followers`, &hint, chromedp.ByQuery),
	)
	assert.Contains(t, hint, "moving it rolls out the version it then names there")
	br.run(t, "send an alias name the gateway refuses",
		clearField(`#alias-name`),
		chromedp.SendKeys(`#alias-name`, "Champion", chromedp.ByQuery),
		chromedp.Click(`#set-alias`, chromedp.ByQuery),
		chromedp.WaitVisible(`#alias-form-error`, chromedp.ByQuery),
		chromedp.Text(`#alias-form-error`, &formError, chromedp.ByQuery),
		chromedp.Text(`#alias-name-error`, &fieldError, chromedp.ByQuery),
	)
	assert.Contains(t, formError, "Pointing Champion at version 2 refused:")
	assert.Contains(t, formError, "(HTTP 400)")
	assert.NotEmpty(t, fieldError, "the problem's path.alias is shown at the alias field")

	// Point champion at version 1.
	var done string
	br.run(t, "point champion at version 1",
		clearField(`#alias-name`),
		chromedp.SendKeys(`#alias-name`, "champion", chromedp.ByQuery),
		chromedp.WaitNotVisible(`#alias-name-error`, chromedp.ByQuery),
		chromedp.SetValue(`#alias-version`, "1", chromedp.ByQuery),
		chromedp.Click(`#set-alias`, chromedp.ByQuery),
		chromedp.WaitVisible(`#alias-set`, chromedp.ByQuery),
		chromedp.Text(`#alias-set`, &done, chromedp.ByQuery),
		chromedp.WaitVisible(`#aliases tr[data-alias="champion"][data-version="1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#alias-events tr[data-alias="champion"][data-to="1"]`, chromedp.ByQuery),
	)
	assert.Equal(t, "Alias champion now names version 1.", done)
	assert.Equal(t, map[string]string{"candidate": "v2 followed by chat", "champion": "v1 followed by no endpoint"}, aliases())
	assert.Equal(t, []versionRow{row(1, "candidate"), row(0, "champion")}, readVersions())
	res, err := s.client().GetModelWithResponse(ctx, s.project, "sentiment")
	require.NoError(t, err)
	require.NotNil(t, res.JSON200, "%s", res.Body)
	assert.Equal(t, map[string]int{"candidate": 2, "champion": 1}, res.JSON200.Aliases, "REST agrees")

	// Version 1 cannot go while champion names it: the 409 says so.
	var confirm, refused string
	br.run(t, "try to delete version 1",
		chromedp.Click(`#versions tr[data-version="1"] button.delete-version`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-model`, chromedp.ByQuery),
		chromedp.Text(`#confirm-model .confirm-text`, &confirm, chromedp.ByQuery),
		chromedp.Click(`#confirm-model-yes`, chromedp.ByQuery),
		chromedp.WaitVisible(`#model-flash .alert.error`, chromedp.ByQuery),
		chromedp.Text(`#model-flash .alert.error`, &refused, chromedp.ByQuery),
	)
	assert.Contains(t, confirm, "Delete version 1 of sentiment?")
	assert.True(t, strings.HasPrefix(refused, "Delete version refused: "), refused)
	assert.Contains(t, refused, "version 1 of model sentiment is named by alias champion: move or remove it first (HTTP 409)")
	if shots != "" {
		formShot(t, br, filepath.Join(shots, "ui-models.png")) // tall enough for the alias history
	}

	// Remove champion, then version 1 goes.
	var history []string
	br.run(t, "keep version 1, remove champion",
		chromedp.Click(`#confirm-model-no`, chromedp.ByQuery),
		chromedp.Click(`#aliases tr[data-alias="champion"] button.remove-alias`, chromedp.ByQuery),
		br.waitText(`#confirm-model .confirm-text`, "Remove the alias champion (version 1)?"),
		chromedp.Click(`#confirm-model-yes`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`#aliases tr[data-alias="champion"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#alias-events tr[data-alias="champion"][data-from="1"][data-to=""]`, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("#alias-events tbody tr")].map(tr =>
			[...tr.children].slice(1).map(td => td.textContent).join(" "))`, &history),
	)
	assert.Equal(t, []string{"champion v1 removed ci-editor", "champion new v1 ci-editor", "candidate new v2 ci-editor"}, history, "newest first")
	br.run(t, "delete version 1",
		chromedp.Click(`#versions tr[data-version="1"] button.delete-version`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-model-yes`, chromedp.ByQuery),
		chromedp.Click(`#confirm-model-yes`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`#versions tr[data-version="1"]`, chromedp.ByQuery),
		br.waitText(`#model-flash`, "Deleted version 1."),
	)
	assert.Equal(t, []versionRow{row(1, "candidate")}, readVersions())
	code, _ = s.raw("GET", s.path("/models/sentiment/versions/1"), nil)
	assert.Equal(t, 404, code, "REST agrees: version 1 is gone")

	// The endpoint's page: what it serves, linked back here.
	var ep struct {
		Ref, Version, Href, Follow, FollowText string
	}
	br.run(t, "open the endpoint serving the model",
		chromedp.Click(`#model-endpoints tr[data-endpoint="chat"] a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#registered-model`, chromedp.ByQuery),
		chromedp.Evaluate(`(() => {
			const v = document.querySelector("#registered-version"), f = document.querySelector("#model-follow");
			return {ref: document.querySelector("#model-ref").textContent, version: v.textContent, href: v.getAttribute("href"),
				follow: f.dataset.follow, followText: f.textContent};
		})()`, &ep),
	)
	assert.Equal(t, "sentiment@candidate", ep.Ref)
	assert.Equal(t, "sentiment version 2", ep.Version)
	assert.Equal(t, modelHash, ep.Href)
	assert.Equal(t, "true", ep.Follow)
	assert.Contains(t, ep.FollowText, "follows candidate")
	var hash string
	br.run(t, "back to the model",
		chromedp.Click(`#registered-version`, chromedp.ByQuery),
		chromedp.WaitVisible(`#versions tr[data-version="2"]`, chromedp.ByQuery),
		chromedp.Evaluate(`location.hash`, &hash),
	)
	assert.Equal(t, modelHash, hash)

	// A model that is not there: the gateway's 404, and no empty cards.
	var missing string
	var cards int
	br.run(t, "a model that does not exist",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/models/nope"),
		br.waitText(`section.model .alert.error`, "HTTP 404"),
		chromedp.Text(`section.model .alert.error`, &missing, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("section.model .card")].filter(c => c.getClientRects().length > 0).length`, &cards),
	)
	assert.Contains(t, missing, "model nope")
	assert.Equal(t, 1, cards, "only the head")

	// A viewer reads the page but is offered no change (and sends none).
	secret, tokenHash := tokens.New()
	_, err = s.store.CreateToken(ctx, catalog.Token{Name: "ci-viewer", Project: s.project, Role: tokens.RoleViewer}, tokenHash)
	require.NoError(t, err)
	var offered struct {
		Note                           string
		Form, Register, Remove, Delete int
		Versions, EndpointRow          int
	}
	br.run(t, "log out", chromedp.Click(`#logout`, chromedp.ByQuery), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	br.signIn(t, s.url, secret)
	br.run(t, "the model's page as a viewer",
		chromedp.Navigate(s.url+"/ui/"+modelHash),
		chromedp.WaitVisible(`#versions tr[data-version="2"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#model-endpoints tr[data-endpoint="chat"]`, chromedp.ByQuery),
		chromedp.Evaluate(`({
			note: document.querySelector("#model-role-note")?.textContent ?? "",
			form: document.querySelectorAll("#alias-form").length,
			register: document.querySelectorAll("#register-form, #open-register").length,
			remove: document.querySelectorAll("button.remove-alias").length,
			delete: document.querySelectorAll("button.delete-version").length,
			versions: document.querySelectorAll("#versions tbody tr").length,
			endpointRow: document.querySelectorAll("#model-endpoints tbody tr").length,
		})`, &offered),
	)
	assert.Equal(t, "Registering versions, setting and removing aliases and deleting versions needs an editor token of this project (or an admin's); this token (ci-viewer) is a viewer.", offered.Note)
	assert.Zero(t, offered.Form+offered.Register+offered.Remove+offered.Delete, "no form, Remove or Delete: %+v", offered)
	assert.Equal(t, 1, offered.Versions)
	assert.Equal(t, 1, offered.EndpointRow)
	var listNote string
	var newModel int
	br.run(t, "the list as a viewer",
		chromedp.Click(`a.button[href$="/models"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#models tr[data-model="reviews"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#new-model, #new-model-form").length`, &newModel),
		chromedp.Text(`#models-role-note`, &listNote, chromedp.ByQuery),
	)
	assert.Zero(t, newModel, "no New model…")
	assert.Equal(t, "Creating models and registering versions needs an editor token of this project (or an admin's); this token (ci-viewer) is a viewer.", listNote)

	// The refused alias name and deletion, the missing model and the
	// forms' refusals are the only errors the browser logged.
	for _, e := range br.pageErrors() {
		if !(strings.Contains(e, "/aliases/Champion") && strings.Contains(e, "status of 400")) &&
			!(strings.Contains(e, "/versions/1") && strings.Contains(e, "status of 409")) &&
			!(strings.Contains(e, "/models/nope") && strings.Contains(e, "status of 404")) &&
			!(strings.HasSuffix(e, "/models)") && (strings.Contains(e, "status of 422") || strings.Contains(e, "status of 409"))) &&
			!(strings.HasSuffix(e, "/models/reviews/versions)") && strings.Contains(e, "status of 422")) &&
			!(strings.HasSuffix(e, "/runs/nope/artifacts)") && strings.Contains(e, "status of 404")) {
			t.Errorf("page error: %s", e)
		}
	}
}
