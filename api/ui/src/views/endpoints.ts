// Inference endpoints: the project's list, and one endpoint's page as its
// workflow reports it (GET …/endpoints/{e}): its revisions with their
// traffic weights and replicas (wanted, and ready as observed), the
// rollout in progress with its gates beside the figures of the traffic
// window they judge (requests, errors, p99 through the gateway), the
// autoscaler's last decision, the events and, for a spec naming a model
// of the registry (model.ref), the version the latest revision serves
// (linked to the model's page, views/models.ts); and Promote, Abort and
// Rollback, each sent only from its confirmation form (the gateway's
// problem shows there when it refuses: a 409 when nothing rolls out).
// Both pages refresh every few seconds while open.

import { ApiError, call, enc, get } from "../api";
import { badge, fmtTime, h, json, replace, s } from "../dom";
import { fmtGoDuration } from "../goduration";
import { href } from "../route";
import { canEdit, roleNote } from "../session";
import type { Endpoint, EndpointEvent, EndpointModel, EndpointGates, EndpointObserved, EndpointRollback, EndpointRollout, EndpointSummary, EndpointTrafficWindow, EndpointList } from "../types";
import { errorBox, message, type View } from "./view";

const REFRESH_MS = 3000;
const LIST_REFRESH_MS = 5000;

/** endpointState sums an endpoint up: DELETING, ROLLING_OUT, SERVING (a stable revision with a ready replica), SCALED_TO_ZERO or NOT_SERVING. */
export function endpointState(v: Endpoint): string {
  if (v.deleting) return "DELETING";
  if (v.rollout) return "ROLLING_OUT";
  if (!v.stable) return "NOT_SERVING";
  const o = v.observed.find((x) => x.revision === v.stable);
  if (o && o.ready > 0) return "SERVING";
  if (o && o.replicas === 0) return "SCALED_TO_ZERO";
  return "NOT_SERVING";
}

/** trafficText is "r1 90% · r2 10%". */
function trafficText(v: Endpoint): string {
  return v.traffic.length ? v.traffic.map((w) => `r${w.revision} ${w.weight}%`).join(" · ") : "none";
}

/** readyText is "ready/replicas" over every revision, as observed. */
function readyText(obs: EndpointObserved[]): string {
  const ready = obs.reduce((n, o) => n + o.ready, 0);
  const all = obs.reduce((n, o) => n + o.replicas, 0);
  return `${ready}/${all}`;
}

// ---- the list ----

export class EndpointsPage implements View {
  readonly el = h("section", { class: "page endpoints" });
  private readonly table = h("div", { class: "card table-card" });
  private readonly problem = h("div", {});
  private readonly abort = new AbortController();
  private timer?: number;
  /** Each endpoint's last view (or why it could not be read), kept across refreshes. */
  private readonly views = new Map<string, Endpoint | { err: unknown }>();

  constructor(private readonly project: string) {
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Endpoints"), h("span", { class: "spacer" }), h("span", { class: "muted small" }, `refreshes every ${LIST_REFRESH_MS / 1000}s`)),
      this.problem,
      this.table,
    );
    replace(this.table, h("p", { class: "empty" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const signal = this.abort.signal;
    const base = `/v1/projects/${enc(this.project)}/endpoints`;
    try {
      const list = await get<EndpointList>(base, signal);
      replace(this.problem);
      this.render(list.items);
      // Then each endpoint's view (a query of its workflow), filled in as it comes.
      await Promise.all(
        list.items.map((x) =>
          get<Endpoint>(`${base}/${enc(x.name)}`, signal).then(
            (v) => this.views.set(x.name, v),
            (e: unknown) => {
              if (!signal.aborted) this.views.set(x.name, { err: e });
            },
          ),
        ),
      );
      if (signal.aborted) return;
      this.render(list.items);
    } catch (e) {
      if (signal.aborted) return;
      replace(this.problem, errorBox(e));
      if (this.table.querySelector(".empty")) replace(this.table);
    }
    if (!signal.aborted) this.timer = window.setTimeout(() => void this.load(), LIST_REFRESH_MS);
  }

  private render(items: EndpointSummary[]): void {
    const p = this.project;
    if (!items.length) {
      replace(
        this.table,
        h("p", { class: "empty", id: "no-endpoints" }, "No endpoint in this project. Create one with ", h("code", {}, "POST /v1/projects/{project}/endpoints"), " or a pipeline's inference step."),
      );
      return;
    }
    replace(
      this.table,
      h(
        "table",
        { class: "list", id: "endpoints" },
        h("thead", {}, h("tr", {}, ["Endpoint", "State", "Serving", "Latest", "Traffic", "Ready", "Rollout", "Created"].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          items.map((x) => {
            const v = this.views.get(x.name);
            const cells: Node[] =
              v === undefined
                ? [h("td", { colspan: 6, class: "muted" }, "…")]
                : "err" in v
                  ? [h("td", { colspan: 6, class: "muted" }, `cannot read it: ${message(v.err)}`)]
                  : [
                      h("td", {}, badge(endpointState(v))),
                      h("td", {}, v.stable ? `r${v.stable}` : h("span", { class: "muted" }, "none")),
                      h("td", {}, `r${v.current}`),
                      h("td", { class: "nowrap traffic-text" }, trafficText(v)),
                      h("td", {}, readyText(v.observed)),
                      h("td", {}, v.rollout ? h("span", {}, `r${v.rollout.revision} `, stageBadge(v.rollout)) : h("span", { class: "muted" }, "—")),
                    ];
            return h(
              "tr",
              { "data-endpoint": x.name },
              h("td", {}, h("a", { href: href.endpoint(p, x.name) }, x.name)),
              cells,
              h("td", { class: "nowrap" }, fmtTime(x.createdAt)),
            );
          }),
        ),
      ),
    );
  }
}

// ---- one endpoint ----

/** Confirm is one action's confirmation form. */
interface Confirm {
  form: HTMLFormElement;
  text: HTMLElement;
  error: HTMLElement;
  submit: HTMLButtonElement;
}

export class EndpointPage implements View {
  readonly el = h("section", { class: "page endpoint" });
  private readonly abort = new AbortController();
  private timer?: number;
  private seq = 0;
  private v?: Endpoint;
  private readonly head = h("div", { class: "card run-head" });
  private readonly stateBadge = badge("NOT_SERVING", "endpoint-state");
  private readonly headInfo = h("div", {});
  private readonly problem = h("div", { class: "flash" });
  private readonly rolloutCard = h("div", { class: "card", id: "rollout", hidden: true });
  private readonly revisionsCard = h("div", { class: "card", id: "revisions-card" });
  private readonly eventsCard = h("div", { class: "card", id: "events-card" });
  private readonly specCard = h("div", { class: "card", id: "spec-card" });
  private readonly promoteBtn = h("button", { id: "promote", class: "primary", type: "button", hidden: true, onclick: () => this.open(this.promote) }, "Promote…");
  private readonly abortBtn = h("button", { id: "abort", class: "danger", type: "button", hidden: true, onclick: () => this.open(this.abortForm) }, "Abort…");
  private readonly rollbackBtn = h("button", { id: "rollback", type: "button", hidden: true, onclick: () => this.open(this.rollback) }, "Roll back…");
  private readonly temporalLink = h("a", { id: "temporal-link", class: "button", target: "_blank", rel: "noopener noreferrer", hidden: true }, "Temporal UI ↗");
  private readonly promote: Confirm;
  private readonly abortForm: Confirm;
  private readonly rollback: Confirm & { select: HTMLSelectElement };
  private keys: Record<string, string> = {};

  constructor(
    private readonly project: string,
    private readonly name: string,
  ) {
    this.promote = this.confirm("promote", "Promote", "primary", () => void this.command("promote", this.promote));
    this.abortForm = this.confirm("abort", "Abort rollout", "danger", () => void this.command("abort", this.abortForm));
    const select = h("select", { id: "rollback-to", "aria-label": "revision to roll back to" });
    const rb = this.confirm("rollback", "Roll back", "danger", () => void this.sendRollback(), h("label", { class: "rollback-to" }, "to ", select));
    this.rollback = { ...rb, select };
    select.addEventListener("change", () => this.rollbackText());
    replace(
      this.head,
      h(
        "div",
        { class: "run-title" },
        h("h1", {}, h("span", { class: "muted" }, "Endpoint "), h("span", { id: "endpoint-name" }, name)),
        this.stateBadge,
        h("span", { class: "spacer" }),
        // A viewer is not offered Promote, Abort and Roll back (the gateway would refuse them).
        h("div", { class: "actions" }, canEdit() ? [this.promoteBtn, this.abortBtn, this.rollbackBtn] : null, this.temporalLink, h("a", { class: "button", href: href.endpoints(project) }, "All endpoints")),
      ),
      canEdit() ? null : roleNote("editor", "Promoting, aborting and rolling back", "endpoint-role-note"),
      this.promote.form,
      this.abortForm.form,
      this.rollback.form,
      this.headInfo,
    );
    replace(this.headInfo, h("p", { class: "muted" }, "Loading…"));
    replace(this.el, this.head, this.problem, this.rolloutCard, this.revisionsCard, this.eventsCard, this.specCard);
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private get base(): string {
    return `/v1/projects/${enc(this.project)}/endpoints/${enc(this.name)}`;
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const seq = ++this.seq;
    const signal = this.abort.signal;
    try {
      const v = await get<Endpoint>(this.base, signal);
      if (signal.aborted || seq !== this.seq) return;
      replace(this.problem);
      this.show(v);
    } catch (e) {
      if (signal.aborted || seq !== this.seq) return;
      // What the page showed stays, under the error (a worker restarting
      // answers 503 for a while).
      replace(this.problem, errorBox(e));
      if (!this.v) replace(this.headInfo);
    }
    if (!signal.aborted && seq === this.seq) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  /** show draws a view; each part only when what it shows changed (the forms are never redrawn). */
  private show(v: Endpoint): void {
    this.v = v;
    const state = endpointState(v);
    this.stateBadge.setAttribute("data-state", state);
    this.stateBadge.textContent = state.replace(/_/g, " ");
    this.el.dataset.rollout = v.rollout ? String(v.rollout.revision) : "";
    this.el.dataset.stable = String(v.stable);
    this.el.dataset.current = String(v.current);
    const rolling = !!v.rollout && !v.deleting;
    this.promoteBtn.hidden = !rolling;
    this.abortBtn.hidden = !rolling;
    if (!rolling) {
      this.promote.form.hidden = true;
      this.abortForm.form.hidden = true;
    }
    this.rollbackBtn.hidden = v.deleting || v.revisions.length < 2;
    if (this.rollbackBtn.hidden) this.rollback.form.hidden = true;
    if (v.temporalUI) {
      this.temporalLink.setAttribute("href", v.temporalUI);
      this.temporalLink.hidden = false;
    }
    this.rollbackOptions(v);
    if (v.rollout) {
      replace(this.promote.text, `Promote revision ${v.rollout.revision}? This skips the rollout's current pause (a blue-green preview: switches all traffic to it at once). Gates that fail still roll it back.`);
      replace(
        this.abortForm.text,
        v.stable && v.stable !== v.rollout.revision
          ? `Abort the rollout of revision ${v.rollout.revision}? All traffic goes back to revision ${v.stable} at once and revision ${v.rollout.revision}'s replicas stop.`
          : `Abort the rollout of revision ${v.rollout.revision}? No other revision serves: the endpoint will serve nothing.`,
      );
    }

    this.part("head", [v.current, v.stable, v.spec, v.scale, v.held, v.trafficMode, v.deleting, v.quota, v.traffic], () => replace(this.headInfo, this.facts(v)));
    this.part("rollout", [v.rollout, v.window, v.spec.rollout, v.observed, v.traffic, v.stable], () => {
      this.rolloutCard.hidden = !v.rollout;
      if (v.rollout) replace(this.rolloutCard, this.rolloutBlock(v, v.rollout));
      else replace(this.rolloutCard);
    });
    this.part("revisions", [v.revisions, v.replicas, v.traffic, v.observed, v.stable, v.current, v.rollout?.revision], () => replace(this.revisionsCard, this.revisionsBlock(v)));
    this.part("events", v.events, () => replace(this.eventsCard, this.eventsBlock(v.events)));
    this.part("spec", [v.current, v.spec], () =>
      replace(this.specCard, h("details", {}, h("summary", {}, `Spec of revision ${v.current} (defaults filled in)`), h("pre", { class: "json spec", id: "endpoint-spec" }, json(v.spec)))),
    );
  }

  private part(name: string, what: unknown, draw: () => void): void {
    const key = JSON.stringify(what) ?? "";
    if (this.keys[name] === key) return;
    this.keys[name] = key;
    draw();
  }

  private facts(v: Endpoint): HTMLElement {
    const sp = v.spec;
    const facts: [string, Node | string][] = [];
    const model = sp.model?.name ?? sp.model?.uri ?? "";
    facts.push(["Serves", h("span", {}, h("code", {}, sp.backend ?? "?"), model ? ` model ${model}` : "", sp.image ? h("span", { class: "muted" }, ` · image ${sp.image}`) : null)]);
    if (sp.model?.ref) facts.push([`Model of revision ${v.current}`, this.registered(sp.model)]);
    facts.push(["Serving revision", v.stable ? h("span", { id: "stable-rev" }, `${v.stable}`) : h("span", { class: "muted", id: "stable-rev" }, "none yet")]);
    facts.push(["Latest revision", `${v.current}`]);
    facts.push(["Traffic", h("span", { id: "traffic-text" }, trafficText(v), v.trafficMode ? h("span", { class: "muted" }, ` (${v.trafficMode})`) : null)]);
    const r = sp.replicas;
    if (r) facts.push(["Replicas", `${r.min ?? 1} to ${r.max ?? r.min ?? 1}${sp.resources?.gpus ? `, ${sp.resources.gpus} × ${sp.resources.gpuType ?? "GPU"} each` : ""}`]);
    if (v.scale)
      facts.push([
        "Autoscaler",
        h("span", { id: "scale" }, `${v.scale.desired} replica${v.scale.desired === 1 ? "" : "s"} (${v.scale.reason})`, h("span", { class: "muted" }, `: ${v.scale.message}`), v.scale.metricsUnknown ? h("span", { class: "muted" }, " · metrics unknown") : null),
      ]);
    if (v.held) facts.push(["Held requests", `${v.held} waiting for a ready replica`]);
    return h(
      "div",
      {},
      h("dl", { class: "meta" }, facts.map(([k, x]) => [h("dt", {}, k), h("dd", {}, x)])),
      v.deleting ? h("div", { class: "alert warn" }, "Being deleted: its replicas stop, then the endpoint disappears.") : null,
      v.quota && !v.quota.fits ? h("div", { class: "alert warn", id: "quota" }, v.quota.message) : null,
    );
  }

  /**
   * registered says which registry version the latest revision serves: the
   * reference as written, the exact version it resolved to when the
   * revision was made (linked to the model's page), and whether an alias
   * move rolls out a new revision.
   */
  private registered(m: EndpointModel): HTMLElement {
    const reg = m.registered;
    // follow needs ref to name an alias (the gateway checks): <model>@<alias>.
    const alias = reg?.alias ?? m.ref?.split("@")[1] ?? "";
    return h(
      "span",
      { id: "registered-model" },
      h("code", { id: "model-ref" }, m.ref),
      " → ",
      reg
        ? [
            h("a", { id: "registered-version", href: href.models(this.project, reg.model), "data-version": reg.version }, `${reg.model} version ${reg.version}`),
            h("span", { class: "muted mono small", title: reg.digest }, ` ${shortDigest(reg.digest)}`),
          ]
        : h("span", { class: "muted" }, "not resolved yet"),
      h(
        "span",
        { id: "model-follow", "data-follow": String(!!m.follow) },
        m.follow ? ` · follows ${alias}: moving it rolls out the version it then names` : " · does not follow alias moves (resolved when the revision was made)",
      ),
    );
  }

  // ---- rollout and gates ----

  private rolloutBlock(v: Endpoint, ro: EndpointRollout): Node[] {
    const ro2 = v.spec.rollout ?? {};
    const cand = v.observed.find((o) => o.revision === ro.revision);
    const weight = v.traffic.find((w) => w.revision === ro.revision)?.weight ?? 0;
    const plan: string[] = [];
    if (ro.strategy === "canary") plan.push(`steps ${(ro2.canary?.steps ?? []).map((s) => `${s.weight}%${s.pause ? ` for ${fmtGoDuration(s.pause)}` : ""}`).join(" → ") || "default"}, then the rest in rolling batches`);
    if (ro.strategy === "blueGreen") plan.push(ro2.blueGreen?.autoPromoteAfter ? `a full preview at 0%, promoted after ${fmtGoDuration(ro2.blueGreen.autoPromoteAfter)} with passing gates` : "a full preview at 0%, waiting for Promote");
    if (ro.strategy === "rolling") plan.push(`batches of maxSurge ${ro2.maxSurge ?? 1}, maxUnavailable ${ro2.maxUnavailable ?? 0}`);
    if (ro2.surgeFree) plan.push("surge-free");
    return [
      h(
        "div",
        { class: "card-title" },
        h("h2", {}, `Rollout of revision ${ro.revision}`),
        h("span", { class: "pill", id: "rollout-strategy" }, ro.strategy),
        h("span", { class: "muted" }, "stage"),
        stageBadge(ro, "rollout-stage"),
        h("span", { class: "muted" }, "last step"),
        h("span", { class: "pill", id: "rollout-action" }, ro.action),
        h("span", { class: "spacer" }),
        h("span", { class: "muted" }, `candidate traffic ${weight}%`),
      ),
      plan.length ? h("p", { class: "note" }, plan.join("; "), ".") : null,
      ro.reason ? h("div", { class: "alert info", id: "rollout-reason" }, ro.reason) : null,
      ro.failedGate ? h("div", { class: "alert error", id: "rollout-failed-gate" }, `Failed gate: ${ro.failedGate}`) : null,
      v.quota ? h("p", { class: "muted small", id: "rollout-quota" }, `GPU quota: ${v.quota.message}`) : null,
      h("h3", {}, "Gates"),
      gatesTable(ro2.gates ?? {}, v.window, ro.revision, cand),
    ].filter((x): x is HTMLElement => x !== null);
  }

  // ---- revisions ----

  private revisionsBlock(v: Endpoint): Node[] {
    const revs = [...v.revisions].sort((a, b) => b.number - a.number);
    return [
      h("div", { class: "card-title" }, h("h2", {}, "Revisions"), h("span", { class: "muted small" }, `traffic ${trafficText(v)}`)),
      h(
        "table",
        { class: "list compact", id: "revisions" },
        h("thead", {}, h("tr", {}, ["Revision", "", "Traffic", "Replicas", "Ready", "Created", "Digest"].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          revs.map((r) => {
            const w = v.traffic.find((x) => x.revision === r.number)?.weight ?? 0;
            const want = v.replicas.find((x) => x.revision === r.number)?.replicas;
            const o = v.observed.find((x) => x.revision === r.number);
            const roles: HTMLElement[] = [];
            if (r.number === v.stable) roles.push(h("span", { class: "role serving" }, "serving"));
            if (v.rollout?.revision === r.number) roles.push(h("span", { class: "role candidate" }, "candidate"));
            if (r.number === v.current && r.number !== v.stable && v.rollout?.revision !== r.number) roles.push(h("span", { class: "role" }, "latest"));
            if (r.rollbackOf) roles.push(h("span", { class: "role" }, `rollback to ${r.rollbackOf}`));
            const live = w > 0 || want !== undefined || o !== undefined;
            return h(
              "tr",
              { "data-revision": r.number, "data-weight": w, class: live ? "" : "idle" },
              h("td", { class: "mono" }, `r${r.number}`),
              h("td", {}, roles),
              h("td", { class: "traffic" }, weightBar(w), h("span", { class: "weight" }, `${w}%`)),
              h("td", { class: "replicas-wanted" }, want === undefined ? h("span", { class: "muted" }, "—") : String(want)),
              h("td", { class: "replicas-ready" }, o ? observedCell(o) : h("span", { class: "muted" }, "—")),
              h("td", { class: "nowrap" }, fmtTime(r.createdAt)),
              h("td", { class: "mono small", title: r.digest }, shortDigest(r.digest)),
            );
          }),
        ),
      ),
    ];
  }

  // ---- events ----

  private eventsBlock(events: EndpointEvent[]): Node[] {
    const list = [...events].reverse();
    return [
      h("div", { class: "card-title" }, h("h2", {}, "Events"), h("span", { class: "muted small" }, `${events.length}, newest first`)),
      list.length
        ? h(
            "div",
            { class: "events-scroll" },
            h(
              "table",
              { class: "list compact", id: "events" },
              h("thead", {}, h("tr", {}, ["Time", "Kind", "Revision", "Message"].map((c) => h("th", {}, c)))),
              h(
                "tbody",
                {},
                list.map((e) =>
                  h(
                    "tr",
                    { "data-kind": e.kind },
                    h("td", { class: "nowrap" }, fmtTime(e.at)),
                    h("td", { class: `mono event-kind ${eventClass(e.kind)}` }, e.kind),
                    h("td", {}, e.revision ? `r${e.revision}` : ""),
                    h("td", { class: "event-message" }, e.message),
                  ),
                ),
              ),
            ),
          )
        : h("p", { class: "muted" }, "No event yet."),
    ];
  }

  // ---- actions ----

  private confirm(kind: string, label: string, cls: string, send: () => void, ...fields: Node[]): Confirm {
    const text = h("p", { class: "form-text" });
    const error = h("div", { class: "alert error form-error", role: "alert", hidden: true });
    const submit = h("button", { type: "submit", class: cls, id: `confirm-${kind}` }, label);
    const form: HTMLFormElement = h(
      "form",
      {
        class: `confirm action-form ${kind}-form`,
        id: `${kind}-form`,
        hidden: true,
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          send();
        }) as EventListener,
      },
      text,
      h("div", { class: "actions" }, fields, submit, h("button", { type: "button", class: "cancel", onclick: () => (form.hidden = true) }, "Cancel")),
      error,
    );
    return { form, text, error, submit };
  }

  private open(c: Confirm): void {
    const wasHidden = c.form.hidden;
    for (const f of [this.promote, this.abortForm, this.rollback]) f.form.hidden = true;
    c.form.hidden = !wasHidden;
    c.error.hidden = true;
    if (wasHidden) c.submit.focus();
  }

  /** rollbackOptions lists the revisions to roll back to: every one but the latest (the stable one first chosen). */
  private rollbackOptions(v: Endpoint): void {
    const sel = this.rollback.select;
    const nums = v.revisions.map((r) => r.number).filter((n) => n !== v.current).sort((a, b) => b - a);
    const have = [...sel.options].map((o) => Number(o.value));
    if (JSON.stringify(have) !== JSON.stringify(nums)) {
      const keep = Number(sel.value);
      replace(sel, nums.map((n) => h("option", { value: n }, `revision ${n}${n === v.stable ? " (serving)" : ""}`)));
      sel.value = String(nums.includes(keep) ? keep : nums.includes(v.stable) ? v.stable : (nums[0] ?? ""));
    }
    this.rollbackText();
  }

  private rollbackText(): void {
    const v = this.v;
    if (!v) return;
    const to = this.rollback.select.value;
    replace(
      this.rollback.text,
      `Roll back? This makes revision ${v.current + 1} with revision ${to}'s spec and rolls it out with that spec's strategy${v.rollout ? " (refused while a rollout runs: promote or abort it first)" : ""}.`,
    );
  }

  private async command(verb: "promote" | "abort", c: Confirm): Promise<void> {
    await this.send(c, verb === "promote" ? "Promote" : "Abort", () => call<Endpoint>("POST", `${this.base}/${verb}`, undefined, this.abort.signal));
  }

  private async sendRollback(): Promise<void> {
    const n = Number(this.rollback.select.value);
    if (!n) return;
    const body: EndpointRollback = { revision: n };
    await this.send(this.rollback, "Rollback", () => call<Endpoint>("POST", `${this.base}/rollback`, body, this.abort.signal));
  }

  /** send runs one action: on success the form closes and the endpoint it answered is shown; on failure the problem stays in the form. */
  private async send(c: Confirm, label: string, f: () => Promise<Endpoint>): Promise<void> {
    c.error.hidden = true;
    c.submit.disabled = true;
    try {
      const v = await f();
      c.form.hidden = true;
      this.seq++; // an answer in flight from before is older than this one
      this.show(v);
      replace(this.problem, h("div", { class: "alert info", role: "status", id: "action-done" }, `${label} sent.`));
      clearTimeout(this.timer);
      this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
    } catch (e) {
      if (this.abort.signal.aborted) return;
      const errs = e instanceof ApiError ? (e.problem.errors ?? []) : [];
      replace(c.error, `${label} refused: ${message(e)}`, errs.length ? h("ul", {}, errs.map((fe) => h("li", {}, h("code", {}, fe.path), ": ", fe.message))) : null);
      c.error.hidden = false;
    } finally {
      c.submit.disabled = false;
    }
  }
}

/**
 * gatesTable puts each gate of the candidate's spec beside the figures
 * REST reports for it: the traffic window (requests, errors, p99 through
 * the gateway) and the candidate's observed replicas. The verdict column
 * is read from those figures with the gates' rules (inference/doc.go:
 * traffic gates need minSamples requests; maxErrorRate 1 and
 * maxP99LatencyMs 0 turn a gate off); the rollout's own decision is its
 * last step (action, reason, failed gate) above.
 */
function gatesTable(g: EndpointGates, w: EndpointTrafficWindow | undefined, candidate: number, cand: EndpointObserved | undefined): HTMLElement {
  const win = w && w.revision === candidate ? w : undefined;
  const min = g.minSamples ?? 50;
  const enough = !!win && win.requests >= min;
  const rows: { gate: string; rule: string; live: Node | string; verdict: string; note?: string }[] = [];

  const maxErr = g.maxErrorRate ?? 0.01;
  const rate = win && win.requests > 0 ? win.errors / win.requests : undefined;
  rows.push({
    gate: "ErrorRate",
    rule: maxErr >= 1 ? "off (maxErrorRate 1)" : `errors ≤ ${pct(maxErr)} of requests`,
    live: win ? `${win.errors} error${win.errors === 1 ? "" : "s"} in ${win.requests} request${win.requests === 1 ? "" : "s"}${rate !== undefined ? ` (${pct(rate)})` : ""}` : "no traffic window yet",
    verdict: maxErr >= 1 ? "off" : !enough ? "insufficient" : rate! > maxErr ? "fail" : "pass",
  });
  const maxP99 = g.maxP99LatencyMs ?? 0;
  rows.push({
    gate: "Latency",
    rule: maxP99 > 0 ? `p99 ≤ ${maxP99} ms` : "off (no maxP99LatencyMs)",
    live: win ? (win.p99LatencyMs !== undefined ? `p99 ≤ ${fmtMs(win.p99LatencyMs)}` : "no p99 (no request)") : "no traffic window yet",
    verdict: maxP99 <= 0 ? "off" : !enough || win?.p99LatencyMs === undefined ? "insufficient" : win.p99LatencyMs > maxP99 ? "fail" : "pass",
  });
  rows.push({
    gate: "Samples",
    rule: `≥ ${min} request${min === 1 ? "" : "s"} before a traffic verdict`,
    live: win ? `${win.requests} of ${min} since ${fmtTime(win.from)}` : "—",
    verdict: enough ? "pass" : "insufficient",
    note: `${g.syntheticProbes ? "synthetic probes make up missing samples" : "no synthetic probes"}; short for ${fmtGoDuration(g.maxInsufficient ?? "10m")}: ${g.onInsufficient ?? "pause"}`,
  });
  rows.push({
    gate: "Readiness",
    rule: "replicas ready within their startup deadlines",
    live: cand ? `${cand.ready} of ${cand.replicas} ready${cand.waiting ? ` · ${cand.waiting}` : ""}` : "no replica observed yet",
    verdict: !cand || cand.replicas === 0 ? "insufficient" : cand.ready >= cand.replicas ? "pass" : "pending",
  });
  rows.push({
    gate: "CrashLoop",
    rule: "no replica crash-looping",
    live: cand ? `${cand.crashLooping ?? 0} crash-looping` : "—",
    verdict: !cand ? "insufficient" : (cand.crashLooping ?? 0) > 0 ? "fail" : "pass",
  });
  const verdictText: Record<string, string> = { off: "off", pass: "within", fail: "over the limit", insufficient: "waiting for samples", pending: "starting" };
  return h(
    "div",
    {},
    h(
      "table",
      { class: "list compact", id: "gates" },
      h("thead", {}, h("tr", {}, ["Gate", "Rule", "Now", "As it stands"].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        rows.map((r) =>
          h(
            "tr",
            { "data-gate": r.gate, "data-verdict": r.verdict },
            h("td", { class: "mono" }, r.gate),
            h("td", {}, r.rule, r.note ? h("div", { class: "muted small" }, r.note) : null),
            h("td", { class: "gate-live" }, r.live),
            h("td", {}, h("span", { class: "verdict", "data-verdict": r.verdict }, verdictText[r.verdict] ?? r.verdict)),
          ),
        ),
      ),
    ),
    h(
      "p",
      { class: "muted small", id: "window-note" },
      win
        ? `Traffic window of revision ${win.revision} since ${fmtTime(win.from)}: requests through the gateway${g.syntheticProbes ? " and the worker's probes" : ""}, judged every ${fmtGoDuration(g.analysisInterval ?? "30s")}. `
        : w
          ? `The last traffic window is of revision ${w.revision}, not the candidate's. `
          : "No traffic window reported yet. ",
      "“As it stands” reads these figures with the gates' rules; the rollout's decision is its last step above.",
    ),
  );
}

/** stageBadge shows a rollout's stage, coloured by what its last step did. */
function stageBadge(ro: EndpointRollout, id?: string): HTMLElement {
  const state: Record<string, string> = { Progress: "RUNNING", Paused: "PAUSED", Promote: "SUCCEEDED", RollBack: "FAILED", Done: "SUCCEEDED" };
  return h("span", { class: "badge", "data-state": state[ro.action] ?? "PENDING", id, title: `last step: ${ro.action}` }, ro.stage);
}

/** weightBar draws a traffic weight (SVG attributes: the CSP allows no inline style). */
function weightBar(w: number): SVGElement {
  const x = Math.max(0, Math.min(100, w));
  return s("svg", { class: "weight-bar", width: 80, height: 8, viewBox: "0 0 100 8", "aria-hidden": "true" }, s("rect", { class: "bg", width: 100, height: 8, rx: 2 }), s("rect", { class: "fill", width: x, height: 8, rx: 2 }));
}

function observedCell(o: EndpointObserved): Node[] {
  const out: Node[] = [h("span", { class: "ready-count" }, `${o.ready}/${o.replicas} ready`)];
  if (o.crashLooping) out.push(h("span", { class: "crash" }, ` · ${o.crashLooping} crash-looping`));
  if (o.waiting) out.push(h("div", { class: "muted small" }, o.waiting));
  return out;
}

function eventClass(kind: string): string {
  if (/RollBack|RolledBack|Exceeds|Unknown/.test(kind)) return "bad";
  if (/Promote|Created|Started/.test(kind)) return "good";
  return "";
}

function shortDigest(d: string): string {
  const i = d.indexOf(":");
  return i >= 0 ? `${d.slice(0, i + 1)}${d.slice(i + 1, i + 13)}` : d.slice(0, 12);
}

function pct(x: number): string {
  const v = x * 100;
  return `${v >= 10 || v === 0 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(2)}%`;
}

function fmtMs(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(ms >= 10_000 ? 0 : 1)} s` : `${ms >= 10 ? Math.round(ms) : ms.toFixed(1)} ms`;
}
