// The project's schedules (Temporal Schedules that start runs): per
// schedule, what it starts (a pipeline version or a Go pipeline), its
// timetable, its state (paused, with the note), its next start times and
// the runs it started, and Pause / Unpause (with a note), Trigger now and
// Backfill. Each action opens a form under its schedule and is sent only
// by that form's confirm button; a refused one shows the gateway's
// problem in the form (a backfill's `start` and `end` at their field).
//
// The list refreshes every few seconds. A schedule's card, and any form
// being filled in it, is kept across refreshes: only its facts are drawn
// again, and only when they changed.

import { ApiError, call, enc, get, query } from "../api";
import { badge, fmtDuration, fmtTime, h, json, replace } from "../dom";
import { fmtGoDuration } from "../goduration";
import { href } from "../route";
import { canEdit, roleNote } from "../session";
import { runTerminal, type FieldError, type Run, type RunList, type Schedule, type ScheduleBackfillRequest, type ScheduleList, type ScheduleNote, type ScheduleOverlap } from "../types";
import { errorBox, message, type View } from "./view";

const REFRESH_MS = 5000;
/** While a triggered run has not shown yet, the list is read this often. */
const FAST_MS = 1000;
/** How long a trigger waits for its run to show before saying so. */
const TRIGGER_WAIT_MS = 30_000;
/** The runs shown per schedule (all of them: the runs list, filtered by schedule). */
const RECENT = 5;
const NEXT = 5;

const OVERLAP: Record<ScheduleOverlap, string> = {
  skip: "skip a start while the previous run still runs",
  bufferOne: "buffer one start while the previous run still runs",
  bufferAll: "buffer every start while the previous run still runs",
  cancelOther: "cancel the running run, then start",
  terminateOther: "terminate the running run, then start",
  allowAll: "start anyway (runs may overlap)",
};

export class SchedulesPage implements View {
  readonly el = h("section", { class: "page schedules" });
  private readonly list = h("div", { class: "schedule-list", id: "schedules" });
  private readonly problem = h("div", { id: "schedules-error" });
  private readonly abort = new AbortController();
  private readonly cards = new Map<string, ScheduleCard>();
  private timer?: number;
  private seq = 0;
  private loaded = false;

  constructor(
    private readonly project: string,
    private readonly focus?: string,
  ) {
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Schedules"), h("span", { class: "spacer" }), h("span", { class: "muted small" }, `refreshes every ${REFRESH_MS / 1000}s`)),
      canEdit() ? null : roleNote("editor", "Pausing, unpausing, triggering and backfilling schedules", "schedules-role-note"),
      this.problem,
      this.list,
    );
    replace(this.list, h("p", { class: "muted" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get base(): string {
    return `/v1/projects/${enc(this.project)}`;
  }

  /** load reads the schedules and the runs each started, then again in a few seconds (sooner while a trigger waits for its run). */
  async load(): Promise<void> {
    clearTimeout(this.timer);
    const seq = ++this.seq;
    const signal = this.abort.signal;
    try {
      const list = await get<ScheduleList>(`${this.base}/schedules`, signal);
      // The runs each schedule started, newest first (a run a schedule
      // just started may not be listed yet: its own workflow writes its
      // row; the schedule's recent runs fill in).
      const runs = await Promise.all(
        list.items.map((sc) =>
          get<RunList>(`${this.base}/runs${query({ schedule: sc.name, pageSize: RECENT })}`, signal).then(
            (r) => ({ runs: r.runs }),
            (e: unknown) => ({ err: e }),
          ),
        ),
      );
      if (signal.aborted || seq !== this.seq) return;
      replace(this.problem);
      this.render(list.items, runs);
    } catch (e) {
      if (signal.aborted || seq !== this.seq) return;
      // A refresh that fails keeps what the page showed, with the error above it.
      replace(this.problem, errorBox(e));
      if (!this.loaded) replace(this.list);
    }
    if (!signal.aborted && seq === this.seq) {
      const waiting = [...this.cards.values()].some((c) => c.waiting);
      this.timer = window.setTimeout(() => void this.load(), waiting ? FAST_MS : REFRESH_MS);
    }
  }

  private render(items: Schedule[], runs: Listed[]): void {
    const first = !this.loaded;
    this.loaded = true;
    if (!items.length) {
      this.cards.clear();
      replace(
        this.list,
        h(
          "div",
          { class: "card" },
          h("p", { class: "empty", id: "no-schedules" }, "No schedule in this project. Create one with ", h("code", {}, "POST /v1/projects/{project}/schedules"), " or ", h("code", {}, "atelier schedules create"), "."),
        ),
      );
      return;
    }
    const names = new Set(items.map((x) => x.name));
    for (const name of [...this.cards.keys()]) if (!names.has(name)) this.cards.delete(name);
    const els: HTMLElement[] = [];
    items.forEach((sc, i) => {
      let card = this.cards.get(sc.name);
      if (!card) {
        card = new ScheduleCard(this, sc.name);
        this.cards.set(sc.name, card);
      }
      card.update(sc, runs[i]);
      els.push(card.el);
    });
    // Re-appending a card already in place keeps its forms, inputs and focus.
    if (els.some((el, i) => this.list.children[i] !== el) || this.list.children.length !== els.length) replace(this.list, els);
    if (first && this.focus) {
      const c = this.cards.get(this.focus);
      if (c) {
        c.el.classList.add("focused");
        c.el.scrollIntoView({ block: "start" });
      }
    }
  }

  get projectName(): string {
    return this.project;
  }
}

/** Form is one action's form: its fields, its error line, and the buttons that open and send it. */
interface ActionForm {
  form: HTMLFormElement;
  error: HTMLElement;
  submit: HTMLButtonElement;
  opener: HTMLButtonElement;
  focus?: HTMLElement;
}

/** ScheduleCard is one schedule: built once, its facts redrawn as they change, its forms kept. */
class ScheduleCard {
  readonly el: HTMLElement;
  private sc?: Schedule;
  private readonly stateBadge = badge("ACTIVE");
  private readonly target = h("span", { class: "schedule-target" });
  private readonly info = h("div", { class: "schedule-info" });
  private readonly flash = h("div", { class: "schedule-flash" });
  private readonly pause: ActionForm;
  private readonly unpause: ActionForm;
  private readonly trigger: ActionForm;
  private readonly backfill: ActionForm & { start: HTMLInputElement; end: HTMLInputElement; startError: HTMLElement; endError: HTMLElement };
  private infoKey = "";
  /** The last answer of the runs list for this schedule. */
  private listed?: Listed;
  /** A trigger waiting for its run: the runs the schedule had started before, and since when it waits. */
  private triggered?: { before: Set<string>; at: number };

  constructor(
    private readonly page: SchedulesPage,
    private readonly name: string,
  ) {
    this.pause = this.noteForm("pause", "Pause", "Pause schedule", "danger");
    this.unpause = this.noteForm("unpause", "Unpause", "Unpause schedule", "primary");
    this.trigger = this.triggerForm();
    this.backfill = this.backfillForm();
    this.el = h(
      "article",
      { class: "card schedule", "data-schedule": name },
      h(
        "div",
        { class: "schedule-head" },
        h("h2", { class: "schedule-name" }, name),
        this.stateBadge,
        this.target,
        h("span", { class: "spacer" }),
        // A viewer is not offered the actions (the gateway would refuse them).
        canEdit() ? h("div", { class: "actions" }, this.pause.opener, this.unpause.opener, this.trigger.opener, this.backfill.opener) : null,
      ),
      this.pause.form,
      this.unpause.form,
      this.trigger.form,
      this.backfill.form,
      this.flash,
      this.info,
    );
  }

  /** waiting: a trigger was sent and its run has not shown yet. */
  get waiting(): boolean {
    return !!this.triggered;
  }

  private get path(): string {
    return `${this.page.base}/schedules/${enc(this.name)}`;
  }

  /** update shows the schedule, with the runs listed for it (absent: the last ones listed). */
  update(sc: Schedule, listed?: Listed): void {
    this.sc = sc;
    if (listed) this.listed = listed;
    const runs = this.listed;
    const p = this.page.projectName;
    const state = sc.paused ? "PAUSED" : "ACTIVE";
    this.stateBadge.setAttribute("data-state", state);
    this.stateBadge.textContent = state;
    this.el.dataset.paused = String(sc.paused);
    this.pause.opener.hidden = sc.paused;
    this.unpause.opener.hidden = !sc.paused;
    // A form for the other state is no longer what the user meant.
    if (sc.paused) this.pause.form.hidden = true;
    else this.unpause.form.hidden = true;

    const rows = recentRows(sc, runs && "runs" in runs ? runs.runs : []);
    this.noticeTriggered(rows);

    const key = JSON.stringify([sc, rows.map((r) => [r.id, r.run?.state, r.run?.updatedAt]), runs && "err" in runs ? message(runs.err) : ""]);
    if (key === this.infoKey) {
      this.tick();
      return;
    }
    this.infoKey = key;
    replace(
      this.target,
      sc.pipeline
        ? h("a", { href: href.pipeline(p, sc.pipeline, sc.version), class: "schedule-pipeline" }, sc.pipeline, h("span", { class: "muted" }, ` v${sc.version ?? ""}`))
        : h("span", { class: "schedule-pipeline" }, sc.workflow ?? "", h("span", { class: "muted" }, " (Go)")),
    );

    const facts: [string, Node | string][] = [["Timetable", timetable(sc)]];
    facts.push(["Overlap", h("span", {}, h("code", {}, sc.overlap), h("span", { class: "muted" }, `: ${OVERLAP[sc.overlap] ?? ""}`))]);
    if (sc.catchupWindow) facts.push(["Catch-up window", h("span", { title: sc.catchupWindow }, fmtGoDuration(sc.catchupWindow))]);
    facts.push([
      "Started",
      h("span", { class: "schedule-counts" }, `${sc.actions} run${sc.actions === 1 ? "" : "s"}`, sc.skippedOverlap ? h("span", { class: "muted" }, ` · ${sc.skippedOverlap} start${sc.skippedOverlap === 1 ? "" : "s"} skipped (overlap)`) : null),
    ]);
    if (sc.createdAt || sc.createdBy) facts.push(["Created", `${fmtTime(sc.createdAt)}${sc.createdBy ? ` by ${sc.createdBy}` : ""}`]);

    const note = sc.paused
      ? h("div", { class: "alert warn paused-note" }, h("strong", {}, "Paused"), sc.note ? `: ${sc.note}` : "")
      : sc.note
        ? h("p", { class: "muted small schedule-note" }, `Last note: ${sc.note}`)
        : null;

    const listNote = runs && "err" in runs ? h("div", { class: "alert warn" }, `Could not list the schedule's runs (${message(runs.err)}): showing the ones the schedule reports.`) : null;
    replace(
      this.info,
      note,
      h("dl", { class: "meta" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      sc.params && Object.keys(sc.params).length ? h("details", {}, h("summary", {}, "Parameters"), h("pre", { class: "json" }, json(sc.params))) : null,
      sc.input !== undefined && sc.input !== null ? h("details", {}, h("summary", {}, "Input"), h("pre", { class: "json" }, json(sc.input))) : null,
      h(
        "div",
        { class: "schedule-cols" },
        h("div", { class: "next" }, h("h3", {}, "Next runs"), this.nextRuns(sc)),
        h(
          "div",
          { class: "recent" },
          h("h3", {}, "Recent runs"),
          listNote,
          this.recentTable(rows),
          sc.actions > 0 || rows.length ? h("a", { class: "all-runs small", href: href.runs(p, { schedule: sc.name }) }, "All runs of this schedule →") : null,
        ),
      ),
    );
  }

  /** tick refreshes the relative times ("in 42s") between redraws. */
  private tick(): void {
    for (const el of this.info.querySelectorAll<HTMLElement>(".rel[data-at]")) el.textContent = relative(el.dataset.at!);
  }

  private nextRuns(sc: Schedule): HTMLElement {
    const next = sc.nextRuns.slice(0, NEXT);
    if (!next.length) return h("p", { class: "muted small next-none" }, sc.paused ? "None while paused." : "None: the timetable has no time ahead.");
    return h(
      "div",
      {},
      sc.paused ? h("p", { class: "muted small next-paused" }, "Paused: none of these starts unless it is unpaused by then.") : null,
      h(
        "ol",
        { class: sc.paused ? "next-runs paused" : "next-runs" },
        next.map((t) => h("li", { "data-at": t }, h("span", { class: "nowrap" }, fmtTime(t)), " ", h("span", { class: "muted rel", "data-at": t }, relative(t)))),
      ),
    );
  }

  private recentTable(rows: RecentRow[]): HTMLElement {
    const p = this.page.projectName;
    if (!rows.length) return h("p", { class: "muted small recent-none" }, "No run yet.");
    return h(
      "table",
      { class: "list compact recent-runs" },
      h("thead", {}, h("tr", {}, ["Run", "State", "Scheduled for", "Started", "Duration"].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        rows.map((r) => {
          const st = r.run?.state;
          return h(
            "tr",
            { "data-run": r.id },
            h("td", { class: "mono" }, h("a", { href: href.run(p, r.id) }, r.id)),
            h("td", {}, st ? badge(st) : h("span", { title: "started by the schedule; not in the runs list yet" }, badge("PENDING"))),
            h("td", { class: "nowrap" }, r.scheduledAt ? fmtTime(r.scheduledAt) : h("span", { class: "muted" }, "—")),
            h("td", { class: "nowrap" }, fmtTime(r.createdAt)),
            h("td", { class: "nowrap" }, r.run ? fmtDuration(r.run.createdAt, runTerminal(r.run.state) ? r.run.updatedAt : undefined) : ""),
          );
        }),
      ),
    );
  }

  /** noticeTriggered says which run a trigger started, once the schedule shows a run it did not have before. */
  private noticeTriggered(rows: RecentRow[]): void {
    const t = this.triggered;
    if (!t) return;
    const fresh = rows.filter((r) => !t.before.has(r.id));
    if (fresh.length) {
      this.triggered = undefined;
      const r = fresh[0];
      this.showFlash("info", "Triggered: started run ", h("a", { href: href.run(this.page.projectName, r.id), class: "mono triggered-run" }, r.id), ".");
    } else if (Date.now() - t.at > TRIGGER_WAIT_MS) {
      this.triggered = undefined;
      // Skipped by the overlap policy, or Temporal is slow: say so.
      this.showFlash("warn", `Triggered, but no new run showed in ${TRIGGER_WAIT_MS / 1000}s: with overlap "${this.sc?.overlap}", a start while a run of this schedule still runs may be skipped (see the skipped count).`);
    }
  }

  private showFlash(kind: string, ...msg: (Node | string)[]): void {
    replace(this.flash, h("div", { class: `alert ${kind}`, role: "status" }, msg));
  }

  // ---- actions ----

  private closeForms(except?: HTMLFormElement): void {
    for (const f of [this.pause, this.unpause, this.trigger, this.backfill]) if (f.form !== except) f.form.hidden = true;
  }

  private opener(kind: string, cls: string, label: string, form: () => ActionForm): HTMLButtonElement {
    return h(
      "button",
      {
        type: "button",
        class: `${cls} open open-${kind}`.trim(),
        onclick: () => {
          const f = form();
          const open = f.form.hidden;
          this.closeForms(f.form);
          f.form.hidden = !open;
          if (open) {
            f.error.hidden = true;
            (f.focus ?? f.submit).focus();
          }
        },
      },
      label,
    );
  }

  private shell(kind: string, opener: HTMLButtonElement, submit: HTMLButtonElement, cancelLabel: string, send: () => void, ...body: (Node | string | null)[]): ActionForm {
    const error = h("div", { class: "alert error form-error", role: "alert", hidden: true });
    const form: HTMLFormElement = h(
      "form",
      {
        class: `confirm action-form ${kind}-form`,
        hidden: true,
        novalidate: true,
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          send();
        }) as EventListener,
      },
      body,
      h("div", { class: "actions" }, submit, h("button", { type: "button", class: "cancel", onclick: () => (form.hidden = true) }, cancelLabel)),
      error,
    );
    return { form, error, submit, opener };
  }

  /** noteForm is Pause or Unpause: a note, then the confirm button. */
  private noteForm(verb: "pause" | "unpause", label: string, confirm: string, cls: string): ActionForm {
    const note = h("input", { class: `${verb}-note`, name: "note", maxlength: 1000, placeholder: `why (empty: "${verb}d through REST by <your token>")`, "aria-label": `${verb} note` });
    const submit = h("button", { type: "submit", class: `${cls} confirm-${verb}` }, confirm);
    const text =
      verb === "pause"
        ? `Pause ${this.name}? No run starts on its timetable until it is unpaused (Trigger now and Backfill still start runs). The note is shown with the schedule.`
        : `Unpause ${this.name}? Runs start again on its timetable.`;
    const f: ActionForm = this.shell(verb, this.opener(verb, verb === "pause" ? "" : "primary", label, () => f), submit, "Cancel", () => {
      const body: ScheduleNote = note.value.trim() ? { note: note.value.trim() } : {};
      void this.send(f, `${this.path}/${verb}`, body, label, (sc) => {
        note.value = "";
        this.showFlash("info", sc.paused ? `Paused${sc.note ? `: ${sc.note}` : ""}.` : "Unpaused.");
      });
    }, h("p", { class: "form-text" }, text), h("label", { class: "note-field" }, "Note ", note));
    f.focus = note;
    return f;
  }

  private triggerForm(): ActionForm {
    const submit = h("button", { type: "submit", class: "primary confirm-trigger" }, "Start a run now");
    const text = h("p", { class: "form-text" });
    const f: ActionForm = this.shell("trigger", this.opener("trigger", "", "Trigger now", () => {
      // Said when opened: the schedule's overlap policy decides what happens.
      const sc = this.sc;
      replace(text, `Start a run of ${this.name} now? Its overlap policy applies (${sc ? `${sc.overlap}: ${OVERLAP[sc.overlap] ?? ""}` : ""})${sc?.paused ? "; it starts although the schedule is paused" : ""}.`);
      return f;
    }), submit, "Cancel", () => {
      const before = new Set(recentRows(this.sc!, []).map((r) => r.id));
      for (const tr of this.info.querySelectorAll<HTMLElement>("tr[data-run]")) before.add(tr.dataset.run!);
      void this.send(f, `${this.path}/trigger`, undefined, "Trigger", () => {
        this.triggered = { before, at: Date.now() };
        this.showFlash("info", "Triggered: waiting for the run to start…");
      });
    }, text);
    return f;
  }

  private backfillForm(): ActionForm & { start: HTMLInputElement; end: HTMLInputElement; startError: HTMLElement; endError: HTMLElement } {
    const input = (cls: string, label: string) => h("input", { type: "datetime-local", step: 1, class: cls, name: cls, "aria-label": label });
    const start = input("backfill-start", "backfill start (included)");
    const end = input("backfill-end", "backfill end (excluded)");
    const startError = h("p", { class: "field-error start-error", role: "alert", hidden: true });
    const endError = h("p", { class: "field-error end-error", role: "alert", hidden: true });
    const clear = (i: HTMLInputElement, e: HTMLElement) => i.addEventListener("input", () => setFieldError(i, e));
    clear(start, startError);
    clear(end, endError);
    const submit = h("button", { type: "submit", class: "primary confirm-backfill" }, "Start backfill");
    const tz = Intl.DateTimeFormat().resolvedOptions().timeZone;
    const f: ActionForm = this.shell("backfill", this.opener("backfill", "", "Backfill…", () => f), submit, "Cancel", () => {
      setFieldError(start, startError);
      setFieldError(end, endError);
      // What cannot be sent at all is said here; the gateway judges the rest.
      const s = readLocal(start, startError);
      const e = readLocal(end, endError);
      if (s === undefined || e === undefined) {
        f.error.hidden = true;
        return;
      }
      const body: ScheduleBackfillRequest = { start: s, end: e };
      void this.send(f, `${this.path}/backfill`, body, "Backfill", () => {
        this.showFlash("info", `Backfill sent: the runs scheduled from ${fmtTime(s)} to ${fmtTime(e)} (end excluded) start now.`);
      }, (errs) => {
        const loose: FieldError[] = [];
        for (const fe of errs) {
          if (fe.path === "start") setFieldError(start, startError, fe.message);
          else if (fe.path === "end") setFieldError(end, endError, fe.message);
          else loose.push(fe);
        }
        return loose;
      });
    },
      h(
        "p",
        { class: "form-text" },
        `Start every run ${this.name} would have started in [start, end): a run due at exactly start is started, one at exactly end is not. They start at once, overlapping allowed, even while the schedule is paused; at most 366 days. Times are in this browser's time zone (${tz}).`,
      ),
      h("div", { class: "backfill-fields" }, h("label", {}, "Start (included)", start, startError), h("label", {}, "End (excluded)", end, endError)),
    );
    f.focus = start;
    return { ...f, start, end, startError, endError };
  }

  /**
   * send posts one action. On success the form closes, the schedule the
   * gateway answered is shown and the list is read again; on failure the
   * problem stays in the form (fields: what onFields does not place).
   */
  private async send(f: ActionForm, path: string, body: unknown, label: string, ok: (sc: Schedule) => void, onFields?: (errs: FieldError[]) => FieldError[]): Promise<void> {
    f.error.hidden = true;
    f.submit.disabled = true;
    try {
      const sc = await call<Schedule>("POST", path, body, this.page.signal);
      f.form.hidden = true;
      ok(sc);
      this.update(sc);
      void this.page.load();
    } catch (e) {
      if (this.page.signal.aborted) return;
      const errs = e instanceof ApiError ? (e.problem.errors ?? []) : [];
      const loose = onFields ? onFields(errs) : errs;
      replace(
        f.error,
        `${label} refused: ${message(e)}`,
        loose.length ? h("ul", {}, loose.map((fe) => h("li", {}, h("code", {}, fe.path), ": ", fe.message))) : null,
      );
      f.error.hidden = false;
    } finally {
      f.submit.disabled = false;
    }
  }
}

/** Listed is the runs list's answer for one schedule: its newest runs, or why it failed. */
type Listed = { runs: Run[] } | { err: unknown };

/** RecentRow is a run the schedule started: from the runs list (with its state) and/or the schedule's own recent runs (with when it was due). */
interface RecentRow {
  id: string;
  scheduledAt?: string;
  createdAt?: string;
  run?: Run;
}

/** recentRows merges the listed runs and the schedule's recent runs, newest first, RECENT of them. */
function recentRows(sc: Schedule, runs: Run[]): RecentRow[] {
  const rows = new Map<string, RecentRow>();
  for (const r of runs) rows.set(r.id, { id: r.id, createdAt: r.createdAt, run: r });
  for (const a of sc.recentRuns) {
    const row = rows.get(a.runId) ?? { id: a.runId };
    row.scheduledAt = a.scheduledAt;
    row.createdAt ??= a.startedAt;
    rows.set(a.runId, row);
  }
  const at = (r: RecentRow) => Date.parse(r.createdAt ?? r.scheduledAt ?? "") || 0;
  return [...rows.values()].sort((a, b) => at(b) - at(a) || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0)).slice(0, RECENT);
}

/** timetable renders the schedule's cron expressions and intervals. */
function timetable(sc: Schedule): HTMLElement {
  const parts: (Node | string)[] = [];
  for (const c of sc.cron ?? []) parts.push(h("span", { class: "spec-item" }, "cron ", h("code", {}, c)));
  for (const e of sc.every ?? []) parts.push(h("span", { class: "spec-item" }, "every ", h("code", { title: e }, fmtGoDuration(e))));
  if (!parts.length) {
    // The gateway's view leaves out the cron expressions of a schedule
    // Temporal describes as calendars (it keeps no copy): say so rather
    // than show nothing. The next runs below still follow them.
    parts.push(h("span", { class: "spec-item muted cron-unknown" }, "cron (expressions not reported by the gateway; see the next runs)"));
  }
  const extra: string[] = [];
  if (sc.cron?.length || sc.timeZone) extra.push(`time zone ${sc.timeZone || "UTC"}`);
  if (sc.jitter) extra.push(`jitter up to ${fmtGoDuration(sc.jitter)}`);
  return h("span", { class: "timetable" }, parts, extra.length ? h("span", { class: "muted" }, ` (${extra.join(", ")})`) : null);
}

/** relative says how far a time is from now: "in 42s", "in 3d 4h", "3m 2s ago". */
function relative(iso: string): string {
  const t = Date.parse(iso);
  if (isNaN(t)) return "";
  const ms = Math.abs(t - Date.now());
  let span: string;
  if (ms >= 86_400_000) {
    const d = Math.floor(ms / 86_400_000);
    const hr = Math.floor((ms % 86_400_000) / 3_600_000);
    span = hr ? `${d}d ${hr}h` : `${d}d`;
  } else {
    const now = new Date().toISOString();
    span = t >= Date.now() ? fmtDuration(now, iso) : fmtDuration(iso, now);
  }
  return t >= Date.now() ? `in ${span}` : `${span} ago`;
}

function setFieldError(input: HTMLInputElement, el: HTMLElement, msg?: string): void {
  el.textContent = msg ?? "";
  el.hidden = !msg;
  if (msg) input.setAttribute("aria-invalid", "true");
  else input.removeAttribute("aria-invalid");
}

/** readLocal reads a datetime-local input (the browser's time zone) as RFC 3339 UTC; undefined, with the reason at the field, when it holds no time. */
function readLocal(input: HTMLInputElement, err: HTMLElement): string | undefined {
  if (!input.value) {
    setFieldError(input, err, input.validity.badInput ? "not a complete date and time" : "give a date and time");
    return undefined;
  }
  const d = new Date(input.value);
  if (isNaN(d.getTime())) {
    setFieldError(input, err, "not a date and time");
    return undefined;
  }
  return d.toISOString();
}
