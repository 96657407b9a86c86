// Pipelines of a project, and one pipeline version: its planned DAG and
// its canonical spec, with links to the other versions, to its runs and
// to the form that starts a run of it (launch.ts).

import { enc, get } from "../api";
import { DagView, model } from "../dag";
import { fmtTime, h, json, replace } from "../dom";
import { href } from "../route";
import { canEdit, roleNote } from "../session";
import type { Pipeline, PipelineVersion } from "../types";
import { errorBox, type View } from "./view";

export class PipelinesPage implements View {
  readonly el = h("section", { class: "page pipelines" });
  private readonly abort = new AbortController();

  constructor(private readonly project: string) {
    replace(this.el, h("div", { class: "page-head" }, h("h1", {}, "Pipelines")), h("p", { class: "muted" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
  }

  private async load(): Promise<void> {
    let list: Pipeline[];
    try {
      list = (await get<{ pipelines: Pipeline[] }>(`/v1/projects/${enc(this.project)}/pipelines`, this.abort.signal)).pipelines;
    } catch (e) {
      if (!this.abort.signal.aborted) replace(this.el, errorBox(e));
      return;
    }
    const p = this.project;
    // Starting a run needs an editor: a viewer is not offered Run.
    const edit = canEdit();
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Pipelines")),
      edit ? null : roleNote("editor", "Starting runs", "pipelines-role-note"),
      h(
        "div",
        { class: "card table-card" },
        list.length
          ? h(
              "table",
              { class: "list", id: "pipelines" },
              h("thead", {}, h("tr", {}, ["Pipeline", "Latest version", "Updated", "", ""].map((c) => h("th", {}, c)))),
              h(
                "tbody",
                {},
                list.map((x) =>
                  h(
                    "tr",
                    {},
                    h("td", {}, h("a", { href: href.pipeline(p, x.name) }, x.name)),
                    h("td", {}, h("a", { href: href.pipeline(p, x.name, x.latestVersion) }, `v${x.latestVersion}`)),
                    h("td", { class: "nowrap" }, fmtTime(x.updatedAt)),
                    h("td", {}, h("a", { href: href.runs(p, { pipeline: x.name }) }, "runs")),
                    h("td", { class: "nowrap" }, edit ? h("a", { class: "button small", href: href.launch(p, x.name, x.latestVersion), "data-launch": x.name }, `Run v${x.latestVersion}`) : null),
                  ),
                ),
              ),
            )
          : h("p", { class: "empty" }, "No declarative pipeline yet (POST a spec to /v1/projects/{project}/pipelines/{name}/versions)."),
      ),
    );
  }
}

export class PipelinePage implements View {
  readonly el = h("section", { class: "page pipeline" });
  private readonly abort = new AbortController();

  constructor(
    private readonly project: string,
    private readonly name: string,
    private readonly version?: number,
  ) {
    replace(this.el, h("p", { class: "muted" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
  }

  private async load(): Promise<void> {
    const p = this.project;
    let v: PipelineVersion;
    let latest: Pipeline;
    try {
      const base = `/v1/projects/${enc(p)}/pipelines/${enc(this.name)}`;
      [v, latest] = await Promise.all([
        get<PipelineVersion>(`${base}/versions/${this.version ?? "latest"}`, this.abort.signal),
        get<Pipeline>(base, this.abort.signal),
      ]);
    } catch (e) {
      if (!this.abort.signal.aborted) replace(this.el, errorBox(e));
      return;
    }
    const versions: Node[] = [];
    for (let n = latest.latestVersion; n >= 1; n--) {
      versions.push(h("a", { href: href.pipeline(p, this.name, n), class: n === v.version ? "version current" : "version" }, `v${n}`));
    }
    const dagHost = h("div", { class: "dag-host" });
    replace(
      this.el,
      h(
        "div",
        { class: "card run-head" },
        h(
          "div",
          { class: "run-title" },
          h("h1", {}, h("span", { class: "muted" }, "Pipeline "), this.name, h("span", { class: "muted" }, ` v${v.version}`)),
          h("span", { class: "spacer" }),
          h(
            "div",
            { class: "actions" },
            canEdit() ? h("a", { class: "button primary", id: "launch", href: href.launch(p, this.name, v.version) }, `Run v${v.version}`) : null,
            h("a", { class: "button", href: href.runs(p, { pipeline: this.name }) }, "Runs of this pipeline"),
          ),
        ),
        h(
          "dl",
          { class: "meta" },
          h("dt", {}, "Created"),
          h("dd", {}, `${fmtTime(v.createdAt)}${v.createdBy ? ` by ${v.createdBy}` : ""}`),
          h("dt", {}, "Digest"),
          h("dd", { class: "mono" }, v.digest),
          h("dt", {}, "Versions"),
          h("dd", { class: "versions" }, versions),
        ),
      ),
      canEdit() ? null : roleNote("editor", "Starting runs", "pipeline-role-note"),
      h("div", { class: "card dag-card" }, h("div", { class: "card-title" }, h("h2", {}, "Planned steps")), dagHost),
      h("div", { class: "card" }, h("h2", {}, "Spec"), h("pre", { class: "json spec", id: "spec" }, json(v.spec))),
    );
    const dag = new DagView(dagHost, () => {});
    dag.update(model(v.graph?.steps ?? [], []));
  }
}
