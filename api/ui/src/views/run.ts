// The run page: the run's header (state, pipeline version, times, cancel,
// retry, run again with edited params, the Temporal UI link), its DAG
// (planned steps from the pipeline version's graph, states live from the
// run's event stream) and a drawer
// for the selected step (forEach items, attempts, outputs, errors,
// approval, metrics (a table and sparklines), artifacts, and the log of an
// attempt, followed while it runs).
//
// Parts that hold user input, a stream or fetched data (the cancel form,
// the approval form, the log, the artifacts) are built once and kept
// across updates; the rest is re-rendered only when what it shows changed.

import { call, enc, followLog, get, streamEvents } from "../api";
import { fmtValue, sparkline } from "../chart";
import { DagView, model } from "../dag";
import { badge, fmtDuration, fmtTime, h, json, replace } from "../dom";
import { href, type Route } from "../route";
import { canEdit, roleNote, whoami } from "../session";
import { runTerminal, type Attempt, type PipelineGraphStep, type PipelineVersion, type Run, type RunEvent, type RunStatus, type StepMetrics, type StepStatus } from "../types";
import { ArtifactsSection } from "./artifacts";
import { errorBox, message, type View } from "./view";

type RunRoute = Extract<Route, { page: "run" }>;

/** The most of a log the page keeps (older text is dropped, as a tail). */
const LOG_KEEP = 512 * 1024;

export class RunPage implements View {
  readonly el = h("section", { class: "page run" });
  private readonly abort = new AbortController();
  private readonly project: string;
  private readonly runId: string;
  private run?: Run;
  private status?: RunStatus;
  private graph?: PipelineGraphStep[];
  private graphNote = "";
  private sel?: { step: string; item?: number };
  private pinnedAttempt?: number;

  private readonly head = h("div", { class: "card run-head" });
  private title?: HTMLElement;
  private readonly headInfo = h("div", {});
  private readonly stateBadge = badge("PENDING", "run-state");
  private readonly cancelBtn = h(
    "button",
    {
      id: "cancel-run",
      class: "danger",
      hidden: true,
      onclick: () => {
        this.cancelForm.hidden = false;
        this.cancelForm.querySelector("input")!.focus();
      },
    },
    "Cancel run",
  );
  private readonly retryBtn = h("button", { id: "retry-run", hidden: true, onclick: () => void this.retry() }, "Retry");
  /** A declarative run's "Run again with these params": the launch form, prefilled from this run. */
  private runAgain?: HTMLAnchorElement;
  private readonly flash = h("div", { class: "flash" });
  private readonly dagHost = h("div", { class: "dag-host", id: "dag" });
  private readonly dagNote = h("p", { class: "note" });
  private readonly legend = h("div", { class: "legend" });
  private readonly dag: DagView;
  private readonly drawer = h("aside", { class: "drawer", id: "drawer", hidden: true });
  private readonly drawerInfo = h("div", { class: "drawer-info" });
  private readonly logSection = h("div", { class: "log-section" });
  private log?: LogPane;
  private readonly cancelForm: HTMLFormElement;
  private approval?: { key: string; el: HTMLElement };
  private artifacts?: { key: string; section: ArtifactsSection };
  private headKey = "";
  private drawerKey = "";
  private renderQueued = false;
  private ticker?: number;

  constructor(r: RunRoute) {
    this.project = r.project;
    this.runId = r.run;
    this.sel = r.step ? { step: r.step, item: r.item } : undefined;
    this.dag = new DagView(this.dagHost, (step) => {
      location.hash = href.run(this.project, this.runId, step);
    });
    this.cancelForm = this.buildCancelForm();
    replace(this.drawer, this.drawerInfo, this.logSection);
    replace(
      this.el,
      this.head,
      this.flash,
      h(
        "div",
        { class: "run-body" },
        h("div", { class: "card dag-card" }, h("div", { class: "card-title" }, h("h2", {}, "Steps"), this.legend), this.dagNote, this.dagHost),
        this.drawer,
      ),
    );
    replace(this.head, h("p", { class: "muted" }, "Loading run…"));
    void this.start();
  }

  dispose(): void {
    this.abort.abort();
    clearInterval(this.ticker);
    this.log?.dispose();
    this.artifacts?.section.dispose();
  }

  update(r: Route): boolean {
    if (r.page !== "run" || r.project !== this.project || r.run !== this.runId) return false;
    const next = r.step ? { step: r.step, item: r.item } : undefined;
    if (next?.step !== this.sel?.step || next?.item !== this.sel?.item) this.pinnedAttempt = undefined;
    this.sel = next;
    this.render();
    return true;
  }

  private get base(): string {
    return `/v1/projects/${enc(this.project)}/runs/${enc(this.runId)}`;
  }

  private async start(): Promise<void> {
    try {
      this.run = await get<Run>(this.base, this.abort.signal);
      this.status = this.run.status;
    } catch (e) {
      if (!this.abort.signal.aborted) replace(this.head, errorBox(e));
      return;
    }
    if (this.run.pipeline && this.run.version) {
      try {
        const v = await get<PipelineVersion>(`/v1/projects/${enc(this.project)}/pipelines/${enc(this.run.pipeline)}/versions/${this.run.version}`, this.abort.signal);
        this.graph = v.graph?.steps;
        if (!this.graph) this.graphNote = "The pipeline version did not come with its graph: steps are drawn as they appear.";
      } catch (e) {
        this.graphNote = `Could not load the pipeline version (${message(e)}): steps are drawn as they appear, without dependencies.`;
      }
    } else {
      this.graphNote = `A Go pipeline (${this.run.workflow}): its steps and their order live in Go code, so they are drawn as the run reports them, without dependency edges.`;
    }
    this.render();
    // data-live says whether the page still follows the run (the browser
    // test waits for "ended" before acting on a finished run's page).
    this.el.dataset.live = "following";
    if (runTerminal(this.run.state)) {
      this.el.dataset.live = "ended";
      return;
    }
    await streamEvents(
      `${this.base}/events`,
      (name, data) => this.onEvent(name, data),
      this.abort.signal,
      (e) => this.showFlash(`Live updates interrupted: ${message(e)}`),
      () => !!this.run && runTerminal(this.run.state),
    );
    if (this.abort.signal.aborted) return;
    // The stream ended with the run: one read for what events do not
    // carry (parameters, result, warnings, final timestamps).
    try {
      this.run = await get<Run>(this.base, this.abort.signal);
      this.status = this.run.status;
      this.render();
    } catch {
      /* the events already showed the end */
    }
    this.el.dataset.live = "ended";
  }

  private onEvent(name: string, data: string): void {
    if (!this.run) return;
    this.flash.replaceChildren();
    const st = (this.status ??= { runId: this.runId, project: this.project, workflow: this.run.workflow, state: this.run.state, seq: 0, steps: [] });
    if (name === "step") {
      const step = JSON.parse(data) as StepStatus;
      const i = st.steps.findIndex((x) => x.name === step.name);
      if (i >= 0) st.steps[i] = step;
      else st.steps.push(step);
    } else if (name === "run") {
      const ev = JSON.parse(data) as RunEvent;
      Object.assign(st, ev);
      for (const k of ["startedAt", "finishedAt", "error", "cancel"] as const) if (!(k in ev)) delete st[k];
      this.run.state = ev.state;
    }
    if (!this.renderQueued) {
      this.renderQueued = true;
      queueMicrotask(() => {
        this.renderQueued = false;
        this.render();
      });
    }
  }

  private showFlash(msg: string, kind = "error"): void {
    replace(this.flash, h("div", { class: `alert ${kind}`, role: "alert" }, msg));
  }

  private render(): void {
    if (!this.run) return;
    this.renderHead();
    const steps = this.status?.steps ?? [];
    const m = model(this.graph, steps);
    this.dag.update(m);
    legend(this.legend, m.nodes.map((n) => n.state));
    this.dag.select(this.sel?.step);
    replace(this.dagNote, this.graphNote || (!steps.length && !this.graph ? "No step has started yet." : ""));
    this.dagNote.hidden = !this.dagNote.textContent;
    this.renderDrawer();
  }

  // ---- header ----

  private renderHead(): void {
    const run = this.run!;
    const st = this.status;
    const terminal = runTerminal(run.state);
    // The title row and its buttons are built once and updated in place:
    // a button someone is about to click is never replaced under them.
    if (!this.title) this.title = this.buildTitle(run);
    this.stateBadge.setAttribute("data-state", run.state);
    this.stateBadge.textContent = run.state;
    // A viewer is not offered what it cannot do (the gateway would refuse it).
    const edit = canEdit();
    this.cancelBtn.hidden = !edit || terminal || run.state === "CANCELLING";
    if (this.cancelBtn.hidden) this.cancelForm.hidden = true;
    this.retryBtn.hidden = !edit || !(terminal && run.state !== "SUCCEEDED"); // declarative and Go runs alike
    if (this.runAgain) this.runAgain.hidden = !edit || !terminal;

    const key = JSON.stringify([terminal, st?.startedAt, st?.finishedAt, st?.error, st?.cancel, st?.warnings, st?.params, st?.result, st?.retryOf, st?.scheduleId, st?.targets]);
    if (key === this.headKey) return;
    this.headKey = key;
    const meta: [string, Node | string][] = [];
    if (run.pipeline) {
      meta.push(["Pipeline", h("a", { href: href.pipeline(this.project, run.pipeline, run.version), id: "pipeline-link" }, run.pipeline, h("span", { class: "muted" }, ` v${run.version ?? ""}`))]);
    } else {
      meta.push(["Go workflow", run.workflow]);
    }
    meta.push(["Created", `${fmtTime(run.createdAt)}${run.createdBy ? ` by ${run.createdBy}` : ""}`]);
    if (st?.startedAt) meta.push(["Started", fmtTime(st.startedAt)]);
    if (st?.finishedAt) meta.push(["Finished", fmtTime(st.finishedAt)]);
    clearInterval(this.ticker);
    if (st?.startedAt) {
      // While the run runs, the duration counts up (a text update only).
      const span = h("span", {}, fmtDuration(st.startedAt, st.finishedAt));
      if (!terminal) this.ticker = window.setInterval(() => (span.textContent = `${fmtDuration(st.startedAt)} so far`), 1000);
      meta.push(["Duration", span]);
    }
    if (st?.retryOf) meta.push(["Retry of", h("a", { href: href.run(this.project, st.retryOf), class: "mono" }, st.retryOf)]);
    if (st?.scheduleId) meta.push(["Schedule", h("a", { href: href.schedules(this.project, st.scheduleId), id: "schedule-link" }, st.scheduleId)]);
    if (st?.targets?.length) meta.push(["Targets", `${st.targets.join(", ")} (and what they need; the other steps are skipped)`]);

    const alerts: Node[] = [];
    if (st?.cancel) alerts.push(h("div", { class: "alert info" }, `Cancel requested by ${st.cancel.requester} at ${fmtTime(st.cancel.at)}${st.cancel.reason ? `: ${st.cancel.reason}` : ""}`));
    if (st?.error) alerts.push(h("div", { class: "alert error", id: "run-error" }, st.error));
    for (const w of st?.warnings ?? []) alerts.push(h("div", { class: "alert warn" }, w));

    replace(
      this.headInfo,
      h(
        "dl",
        { class: "meta" },
        meta.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
      ),
      alerts,
      st?.params && Object.keys(st.params).length ? h("details", {}, h("summary", {}, "Parameters"), h("pre", { class: "json" }, json(st.params))) : null,
      st?.result !== undefined ? h("details", {}, h("summary", {}, "Result"), h("pre", { class: "json" }, json(st.result))) : null,
    );
  }

  private buildTitle(run: Run): HTMLElement {
    // Retry takes no params; a run with edited ones is a new run of the
    // version, started from the launch form (a Go run's input has no form).
    if (run.pipeline && run.version) {
      this.runAgain = h("a", { id: "run-again", class: "button", hidden: true, href: href.launch(this.project, run.pipeline, run.version, run.id) }, "Run again with these params");
    }
    const title = h(
      "div",
      { class: "run-title" },
      h("h1", {}, h("span", { class: "muted" }, "Run "), h("span", { class: "mono", id: "run-id" }, run.id)),
      this.stateBadge,
      h("span", { class: "spacer" }),
      h(
        "div",
        { class: "actions" },
        this.cancelBtn,
        this.retryBtn,
        this.runAgain,
        run.links.temporalUI ? h("a", { href: run.links.temporalUI, id: "temporal-link", class: "button", target: "_blank", rel: "noopener noreferrer" }, "Temporal UI ↗") : null,
      ),
    );
    replace(this.head, title, canEdit() ? null : roleNote("editor", "Cancelling, retrying and starting runs", "run-role-note"), this.cancelForm, this.headInfo);
    return title;
  }

  private buildCancelForm(): HTMLFormElement {
    const reason = h("input", { id: "cancel-reason", placeholder: "reason (optional)", maxlength: 1000, "aria-label": "cancel reason" });
    const form: HTMLFormElement = h(
      "form",
      {
        class: "confirm",
        hidden: true,
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
          call<Run>("POST", `${this.base}/cancel`, body, this.abort.signal)
            .then((run) => {
              form.hidden = true;
              this.applyRun(run);
            })
            .catch((e) => this.showFlash(`Cancel failed: ${message(e)}`));
        }) as EventListener,
      },
      h("span", {}, "Cancel this run? Running steps are stopped; nothing new starts."),
      reason,
      h("button", { type: "submit", id: "confirm-cancel", class: "danger" }, "Cancel run"),
      h(
        "button",
        {
          type: "button",
          onclick: () => {
            form.hidden = true;
          },
        },
        "Keep running",
      ),
    );
    return form;
  }

  private async retry(): Promise<void> {
    try {
      const run = await call<Run>("POST", `${this.base}/retry`, {}, this.abort.signal);
      location.hash = href.run(this.project, run.id);
    } catch (e) {
      this.showFlash(`Retry failed: ${message(e)}`);
    }
  }

  /** applyRun takes a run returned by an action (cancel, approve). */
  private applyRun(run: Run): void {
    if (!this.run) return;
    this.run.state = run.state;
    if (run.status && (!this.status || run.status.seq >= this.status.seq)) this.status = run.status;
    this.render();
  }

  // ---- drawer ----

  private renderDrawer(): void {
    const sel = this.sel;
    const step = sel && this.status?.steps.find((x) => x.name === sel.step);
    const planned = sel && this.graph?.find((g) => g.name === sel.step);
    if (!sel || (!step && !planned)) {
      this.drawer.hidden = true;
      this.drawerKey = "";
      this.setLog(undefined);
      this.setArtifacts(undefined);
      return;
    }
    this.drawer.hidden = false;
    const entry = step && sel.item !== undefined ? step.items?.[sel.item] : step;
    const attempt = this.attemptOf(entry);
    const key = JSON.stringify([sel, step, this.pinnedAttempt]);
    if (key !== this.drawerKey) {
      this.drawerKey = key;
      replace(this.drawerInfo, this.drawerContent(sel, step, planned, entry, attempt));
      // An artifacts section no longer shown stops its reads.
      if (this.artifacts && !this.drawerInfo.contains(this.artifacts.section.el)) this.setArtifacts(undefined);
    }
    this.artifacts?.section.observe(this.status);
    // The log of the chosen attempt (the newest unless one was picked);
    // approval steps run nothing, so they have none.
    if (!entry || (step?.items && sel.item === undefined) || (step?.kind || planned?.kind) === "approval") {
      this.setLog(undefined);
      replace(this.logSection);
      return;
    }
    if (!attempt) {
      this.setLog(undefined);
      replace(this.logSection, h("h3", {}, "Log"), h("p", { class: "muted", id: "log-status" }, "No attempt has started yet."));
      return;
    }
    const url = `${this.base}/steps/${enc(sel.step)}/logs${sel.item !== undefined ? `?item=${sel.item}&attempt=${attempt.number}` : `?attempt=${attempt.number}`}`;
    if (this.log?.url !== url) {
      this.setLog(new LogPane(url, `attempt ${attempt.number}`));
      // A Kubernetes attempt's log is its container's, stored by the
      // cluster worker (live for a Job's); the cluster's own views are
      // in the attempt's links.
      const where = attempt.cluster
        ? h("p", { class: "muted", id: "log-where" }, `Kubernetes cluster ${attempt.cluster}${attempt.object ? `, ${attempt.object}` : ""}: the container's log, kept after the pod is gone.`)
        : undefined;
      replace(this.logSection, ...(where ? [where] : []), this.log!.el);
    }
  }

  private setArtifacts(a: { key: string; section: ArtifactsSection } | undefined): void {
    if (this.artifacts && this.artifacts !== a) this.artifacts.section.dispose();
    this.artifacts = a;
  }

  /** artifactsBlock is the section of what a step or item wrote and read, kept while those stay the same. */
  private artifactsBlock(sel: { step: string; item?: number }, entry: StepStatus): HTMLElement | null {
    const outs = entry.artifacts ?? [];
    const ins = entry.inputs ?? [];
    if (!outs.length && !ins.length) return null;
    const key = JSON.stringify([sel.step, sel.item, outs, ins]);
    if (this.artifacts?.key !== key) this.setArtifacts({ key, section: new ArtifactsSection(this.project, this.runId, outs, ins) });
    return this.artifacts!.section.el;
  }

  private setLog(p: LogPane | undefined): void {
    if (this.log && this.log !== p) this.log.dispose();
    this.log = p;
  }

  private attemptOf(entry: StepStatus | undefined): Attempt | undefined {
    const as = entry?.attempts ?? [];
    if (this.pinnedAttempt !== undefined) {
      const a = as.find((x) => x.number === this.pinnedAttempt);
      if (a) return a;
    }
    return as.reduce<Attempt | undefined>((best, a) => (!best || a.number > best.number ? a : best), undefined);
  }

  private drawerContent(sel: { step: string; item?: number }, step: StepStatus | undefined, planned: PipelineGraphStep | undefined, entry: StepStatus | undefined, attempt: Attempt | undefined): Node[] {
    const out: Node[] = [];
    const close = h("a", { class: "close", href: href.run(this.project, this.runId), "aria-label": "close" }, "×");
    out.push(
      h(
        "div",
        { class: "drawer-head" },
        h("h2", { id: "drawer-step" }, sel.step),
        badge(step?.state ?? "PLANNED", "drawer-state"),
        h("span", { class: "spacer" }),
        close,
      ),
    );
    const facts: [string, string][] = [["Kind", step?.kind || planned?.kind || ""]];
    if (planned?.dependsOn.length) facts.push(["Depends on", planned.dependsOn.join(", ")]);
    if (planned?.when) facts.push(["When", planned.when]);
    if (planned?.runIf) facts.push(["Run if", planned.runIf]);
    if (planned?.continueOn) facts.push(["Continue on", `${planned.continueOn} (its failure does not fail the run)`]);
    if (step?.startedAt) facts.push(["Started", fmtTime(step.startedAt)]);
    if (step?.finishedAt) facts.push(["Finished", fmtTime(step.finishedAt)]);
    if (step?.startedAt) facts.push(["Duration", fmtDuration(step.startedAt, step.finishedAt)]);
    out.push(h("dl", { class: "meta small" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
    if (!step) {
      out.push(h("p", { class: "muted" }, "Not started yet."));
      return out;
    }
    if (step.message) out.push(h("div", { class: "alert info" }, step.message, step.state === "WAITING_FOR_GPU" ? [" ", h("a", { href: href.clusters(this.project), id: "gpu-queue-link" }, "See the GPU queue →")] : null));
    if (step.error) out.push(h("div", { class: "alert error", id: "step-error" }, step.error));

    if (step.items) {
      out.push(h("h3", {}, `Items (${step.items.length})`));
      out.push(
        h(
          "table",
          { class: "list compact", id: "items" },
          h("thead", {}, h("tr", {}, ["#", "Item", "State", "Attempts", "Duration"].map((c) => h("th", {}, c)))),
          h(
            "tbody",
            {},
            step.items.map((it, i) =>
              h(
                "tr",
                { class: sel.item === i ? "selected clickable" : "clickable", "data-item": i, onclick: () => (location.hash = href.run(this.project, this.runId, sel.step, i)) },
                h("td", {}, h("a", { href: href.run(this.project, this.runId, sel.step, i) }, String(i))),
                h("td", { class: "mono ellipsis", title: json(it.item) }, JSON.stringify(it.item) ?? ""),
                h("td", {}, badge(it.state)),
                h("td", {}, String(it.attempts?.length ?? 0)),
                h("td", { class: "nowrap" }, fmtDuration(it.startedAt, it.finishedAt)),
              ),
            ),
          ),
        ),
      );
      if (sel.item === undefined) {
        out.push(h("p", { class: "muted" }, "Pick an item for its attempts, outputs, artifacts and log."));
        if (step.outputs !== undefined && step.outputs !== null) out.push(h("h3", {}, "Outputs (one per item)"), h("pre", { class: "json", id: "outputs" }, json(step.outputs)));
        const arts = this.artifactsBlock(sel, step);
        if (arts) out.push(arts);
        return out;
      }
      if (!entry) {
        out.push(h("p", { class: "muted" }, `No item ${sel.item}.`));
        return out;
      }
      out.push(h("h3", {}, `Item ${sel.item}`, " ", badge(entry.state)));
      if (entry.message) out.push(h("div", { class: "alert info" }, entry.message));
      if (entry.error) out.push(h("div", { class: "alert error" }, entry.error));
    }
    if (entry?.approval) out.push(this.approvalBlock(sel.step, entry));
    if (entry?.attempts?.length) out.push(h("h3", {}, "Attempts"), this.attemptsTable(entry.attempts, attempt));
    // A forEach item's outputs are in the step's list once the step ended.
    const outputs = entry?.outputs ?? (step.items && sel.item !== undefined && Array.isArray(step.outputs) ? step.outputs[sel.item] : undefined);
    if (outputs !== undefined && outputs !== null) out.push(h("h3", {}, "Outputs"), h("pre", { class: "json", id: "outputs" }, json(outputs)));
    const metrics = entry?.metrics && metricsBlock(entry.metrics);
    if (metrics) out.push(metrics);
    const arts = entry && this.artifactsBlock(sel, entry);
    if (arts) out.push(arts);
    return out;
  }

  private attemptsTable(as: Attempt[], shown: Attempt | undefined): HTMLElement {
    const pick = (n: number) => () => {
      this.pinnedAttempt = n;
      this.render();
    };
    return h(
      "table",
      { class: "list compact", id: "attempts" },
      h("thead", {}, h("tr", {}, ["#", "State", "Started", "Duration", "Exit"].map((c) => h("th", {}, c)))),
      as.map((a) => {
        const cls = a.number === shown?.number ? "selected clickable" : "clickable";
        const links = Object.entries(a.links ?? {});
        // Details get a full-width row of their own: errors are long.
        const details =
          a.error || a.message || a.cluster || links.length || a.execution
            ? h(
                "tr",
                { class: `${cls} details`, onclick: pick(a.number) },
                h(
                  "td",
                  { colspan: 5 },
                  a.error ? h("div", { class: "err" }, a.error) : null,
                  a.message ? h("div", {}, a.message) : null,
                  a.execution
                    ? h("div", { class: "muted" }, `command ran ${a.execution} times: its process was lost with its worker (ATELIER_EXECUTION=${a.execution})`)
                    : null,
                  a.cluster ? h("div", { class: "muted" }, `cluster ${a.cluster}${a.object ? `: ${a.object}` : ""}`) : null,
                  links.map(([name, url]) => h("a", { href: url, target: "_blank", rel: "noopener noreferrer", class: "ext" }, `${name} ↗`)),
                ),
              )
            : null;
        return h(
          "tbody",
          { "data-attempt": a.number, title: "show this attempt's log" },
          h(
            "tr",
            { class: cls, onclick: pick(a.number) },
            h("td", {}, String(a.number)),
            h("td", {}, badge(a.state)),
            h("td", { class: "nowrap" }, fmtTime(a.startedAt)),
            h("td", { class: "nowrap" }, fmtDuration(a.startedAt, a.finishedAt)),
            h("td", {}, a.exitCode !== undefined ? String(a.exitCode) : ""),
          ),
          details,
        );
      }),
    );
  }

  /** approvalBlock shows an approval step's request or decision; its form is kept while the step waits. */
  private approvalBlock(step: string, entry: StepStatus): HTMLElement {
    const a = entry.approval!;
    if (entry.state !== "WAITING_FOR_APPROVAL") {
      this.approval = undefined;
      return h(
        "div",
        { class: "approval" },
        h("h3", {}, "Approval"),
        a.message ? h("p", {}, a.message) : null,
        a.decision
          ? h("p", {}, `${a.decision === "approved" ? "Approved" : "Rejected"}${a.timedOut ? " by the timeout" : a.approver ? ` by ${a.approver} (${a.approverRole ?? ""})` : ""}${a.decidedAt ? ` at ${fmtTime(a.decidedAt)}` : ""}`)
          : null,
        a.comment ? h("blockquote", {}, a.comment) : null,
      );
    }
    const key = `${step}`;
    if (this.approval?.key === key) return this.approval.el;
    // The step's rule says which roles decide (approval.roles); another
    // role is shown the request without the form.
    const me = whoami();
    if (me && !a.roles.includes(me.role)) {
      const el = h(
        "div",
        { class: "approval waiting" },
        h("h3", {}, "Waiting for approval"),
        a.message ? h("p", {}, a.message) : null,
        h("p", { class: "muted" }, `May decide: ${a.roles.join(", ")}${a.deadline ? ` · decides ${a.onTimeout ?? "reject"} at ${fmtTime(a.deadline)}` : ""}`),
        h("p", { class: "role-note", id: "approval-role-note" }, `This token (${me.name}) is ${me.role === "viewer" ? "a" : "an"} ${me.role}: it cannot decide this step.`),
      );
      this.approval = { key, el };
      return el;
    }
    const comment = h("textarea", { id: "approval-comment", rows: 2, maxlength: 4000, placeholder: a.commentRequired ? "comment (required)" : "comment (optional)" });
    const decide = (verb: "approve" | "reject") =>
      call<Run>("POST", `${this.base}/steps/${enc(step)}/${verb}`, comment.value.trim() ? { comment: comment.value.trim() } : {}, this.abort.signal)
        .then((run) => this.applyRun(run))
        .catch((e) => this.showFlash(`${verb === "approve" ? "Approve" : "Reject"} failed: ${message(e)}`));
    const el = h(
      "div",
      { class: "approval waiting" },
      h("h3", {}, "Waiting for approval"),
      a.message ? h("p", {}, a.message) : null,
      h("p", { class: "muted" }, `May decide: ${a.roles.join(", ")}${a.deadline ? ` · decides ${a.onTimeout ?? "reject"} at ${fmtTime(a.deadline)}` : ""}`),
      comment,
      h(
        "div",
        { class: "actions" },
        h("button", { id: "approve", class: "primary", onclick: () => void decide("approve") }, "Approve"),
        h("button", { id: "reject", class: "danger", onclick: () => void decide("reject") }, "Reject"),
      ),
    );
    this.approval = { key, el };
    return el;
  }
}

/** LogPane shows one attempt's log, following it while the attempt runs. */
class LogPane {
  readonly el: HTMLElement;
  private readonly abort = new AbortController();
  private readonly pre = h("pre", { class: "log", id: "log", tabindex: 0 });
  private readonly text = document.createTextNode("");
  private readonly status = h("span", { class: "muted", id: "log-status" });
  private readonly follow = h("input", { type: "checkbox", id: "log-follow", checked: true });
  private trimmed = false;

  constructor(
    readonly url: string,
    label: string,
  ) {
    this.pre.appendChild(this.text);
    this.el = h(
      "div",
      { class: "log-pane" },
      h("div", { class: "log-head" }, h("h3", {}, `Log · ${label}`), h("span", { class: "spacer" }), this.status, h("label", { class: "follow" }, this.follow, " follow")),
      this.pre,
    );
    this.follow.addEventListener("change", () => this.scroll());
    // Scrolling up stops following; back at the bottom follows again.
    this.pre.addEventListener("scroll", () => {
      const atEnd = this.pre.scrollHeight - this.pre.scrollTop - this.pre.clientHeight < 8;
      if (this.follow.checked !== atEnd && document.activeElement === this.pre) this.follow.checked = atEnd;
    });
    void followLog(url, (t) => this.append(t), this.abort.signal, (st, msg) => {
      this.status.textContent = st === "streaming" ? "● live" : st === "complete" ? "complete" : (msg ?? "error");
      this.status.setAttribute("data-log", st);
      if (st === "complete" && !this.text.length) this.text.appendData("(no output)");
    });
  }

  private append(t: string): void {
    if (!t) return;
    this.text.appendData(t);
    if (this.text.length > LOG_KEEP) {
      const cut = this.text.length - LOG_KEEP;
      const nl = this.text.data.indexOf("\n", cut);
      this.text.deleteData(0, nl >= 0 && nl - cut < 4096 ? nl + 1 : cut);
      if (!this.trimmed) {
        this.trimmed = true;
        this.pre.before(h("p", { class: "muted small" }, `Showing the last ${LOG_KEEP / 1024} KiB.`));
      }
    }
    this.scroll();
  }

  private scroll(): void {
    if (this.follow.checked) this.pre.scrollTop = this.pre.scrollHeight;
  }

  dispose(): void {
    this.abort.abort();
  }
}

/** metricsBlock shows what a step (or item) reported in $ATELIER_METRICS: its numbers as a table, each series as a sparkline. */
function metricsBlock(m: StepMetrics): HTMLElement | null {
  const scalars = Object.entries(m.scalars ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const series = Object.entries(m.series ?? {})
    .filter(([, v]) => v.length)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (!scalars.length && !series.length) return null;
  return h(
    "div",
    { class: "metrics", id: "step-metrics" },
    h("h3", {}, "Metrics"),
    scalars.length
      ? h(
          "table",
          { class: "list compact scalars" },
          h("thead", {}, h("tr", {}, h("th", {}, "Metric"), h("th", {}, "Value"))),
          h(
            "tbody",
            {},
            scalars.map(([k, v]) => h("tr", { "data-metric": k }, h("td", { class: "mono" }, k), h("td", { class: "mono value", title: String(v) }, fmtValue(v)))),
          ),
        )
      : null,
    series.map(([k, v]) => sparkline(k, v)),
  );
}

const LEGEND_ORDER = ["PLANNED", "PENDING", "RUNNING", "RETRYING", "WAITING_FOR_GPU", "WAITING_FOR_APPROVAL", "SUCCEEDED", "CACHED", "FAILED", "SKIPPED", "CANCELLED"];

/** legend lists the states the graph shows, with their counts. */
function legend(el: HTMLElement, states: string[]): void {
  const n = new Map<string, number>();
  for (const st of states) n.set(st, (n.get(st) ?? 0) + 1);
  replace(
    el,
    LEGEND_ORDER.filter((st) => n.has(st)).map((st) => h("span", { class: "key", "data-state": st }, h("i", {}), `${n.get(st)} ${st === "PLANNED" ? "not started" : st.replace(/_/g, " ").toLowerCase()}`)),
  );
}
