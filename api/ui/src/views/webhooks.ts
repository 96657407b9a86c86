// Webhooks (#/p/<project>/webhooks): the project's webhooks, oldest first,
// each with its URL, events, pipeline filter, enabled state and its last
// delivery; a webhook's page (…/webhooks/<id>) has its deliveries, newest
// first and paged, each with every attempt (when, how long, the
// receiver's status code, the error). Secrets are never served, so never
// shown. Every webhook route needs an editor token (a URL may carry the
// receiver's credentials): a viewer is told so instead of being shown a
// 403 (a 403 all the same is said as such). Both pages refresh every few
// seconds.

import { ApiError, call, enc, get, query } from "../api";
import { fmtTime, h, replace } from "../dom";
import { href } from "../route";
import { canEdit, needs } from "../session";
import type { Webhook, WebhookAttempt, WebhookDelivery, WebhookDeliveryList } from "../types";
import { errorBox, message, type View } from "./view";

const REFRESH_MS = 5000;
const PAGE_SIZE = 20;

/** problemBox is errorBox, with what a 403 or 503 means here. */
function problemBox(e: unknown): HTMLElement {
  const box = errorBox(e);
  if (e instanceof ApiError && e.status === 403)
    box.append(h("div", { class: "hint" }, "Webhooks are shown to editors only, as their URLs may carry the receiver's credentials: sign in with an editor token of this project (or an admin's)."));
  if (e instanceof ApiError && e.status === 503) box.append(h("div", { class: "hint" }, "This gateway serves no webhooks."));
  return box;
}

/** viewerBox says why a viewer sees no webhook: reading them needs an editor (no request is sent). */
function viewerBox(): HTMLElement {
  return h(
    "div",
    { class: "alert info", id: "webhooks-role-note", "data-needs": "editor" },
    needs("editor", "Reading webhooks"),
    h("div", { class: "hint" }, "Webhooks are shown to editors only, as their URLs may carry the receiver's credentials."),
  );
}

const DELIVERY_STATE: Record<string, string> = { pending: "PENDING", succeeded: "SUCCEEDED", failed: "FAILED" };

function deliveryBadge(state: string): HTMLElement {
  return h("span", { class: "badge", "data-state": DELIVERY_STATE[state] ?? state, "data-delivery": state }, state);
}

function enabledBadge(w: Webhook): HTMLElement {
  return h("span", { class: "badge", "data-state": w.enabled ? "SUCCEEDED" : "CANCELLED", "data-enabled": String(w.enabled) }, w.enabled ? "enabled" : "disabled");
}

function statusCode(code?: number): HTMLElement {
  if (code === undefined) return h("span", { class: "muted", title: "no response" }, "—");
  return h("span", { class: code >= 200 && code < 300 ? "http ok" : "http bad" }, String(code));
}

function events(w: Webhook): HTMLElement {
  return h(
    "span",
    { class: "chips" },
    w.events.map((e) => h("span", { class: "chip mono", "data-event": e }, e)),
  );
}

function fmtMs(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

export class WebhooksPage implements View {
  readonly el = h("section", { class: "page webhooks" });
  private readonly table = h("div", { class: "card table-card", id: "webhooks-host" });
  private readonly abort = new AbortController();
  private timer?: number;

  constructor(private readonly project: string) {
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Webhooks"), h("span", { class: "spacer" }), h("span", { class: "muted small" }, `refreshes every ${REFRESH_MS / 1000}s`)),
      h(
        "p",
        { class: "note" },
        "Run events (run.finished, step.failed, approval.requested) are POSTed to these URLs, signed with each webhook's secret (never shown). Create and change webhooks over REST or the CLI.",
      ),
      this.table,
    );
    if (!canEdit()) {
      replace(this.table, viewerBox());
      return;
    }
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
    const base = `/v1/projects/${enc(this.project)}/webhooks`;
    try {
      const list = (await get<{ items: Webhook[] }>(base, signal)).items;
      // Each one's newest delivery: is it working?
      const last = new Map<string, WebhookDelivery | Error | undefined>();
      await Promise.all(
        list.map(async (w) => {
          try {
            last.set(w.id, (await get<WebhookDeliveryList>(`${base}/${enc(w.id)}/deliveries?pageSize=1`, signal)).items[0]);
          } catch (e) {
            last.set(w.id, e instanceof Error ? e : new Error(String(e)));
          }
        }),
      );
      if (signal.aborted) return;
      this.render(list, last);
    } catch (e) {
      if (signal.aborted) return;
      replace(this.table, problemBox(e));
      // A role that cannot list them will not be able to in 5 s either.
      if (e instanceof ApiError && (e.status === 403 || e.status === 503)) return;
    }
    if (!signal.aborted) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  private render(list: Webhook[], last: Map<string, WebhookDelivery | Error | undefined>): void {
    const p = this.project;
    replace(
      this.table,
      list.length
        ? h(
            "table",
            { class: "list", id: "webhooks" },
            h("thead", {}, h("tr", {}, ["URL", "Events", "Pipeline", "State", "Last delivery", "Created"].map((c) => h("th", {}, c)))),
            h(
              "tbody",
              {},
              list.map((w) => {
                const d = last.get(w.id);
                return h(
                  "tr",
                  { "data-webhook": w.id },
                  h("td", { class: "url-cell" }, h("a", { class: "mono webhook-url", href: href.webhooks(p, w.id) }, w.url), w.description ? h("div", { class: "muted small" }, w.description) : null),
                  h("td", {}, events(w)),
                  h("td", {}, w.pipeline ?? h("span", { class: "muted" }, "every run")),
                  h("td", {}, enabledBadge(w)),
                  h(
                    "td",
                    { class: "nowrap" },
                    d instanceof Error
                      ? h("span", { class: "error-text", title: message(d) }, "unreadable")
                      : d
                        ? [deliveryBadge(d.state), " ", h("span", { class: "muted small" }, `${d.event} · ${fmtTime(d.createdAt)}`)]
                        : h("span", { class: "muted" }, "none yet"),
                  ),
                  h("td", { class: "nowrap" }, fmtTime(w.createdAt), w.createdBy ? h("div", { class: "muted small" }, w.createdBy) : null),
                );
              }),
            ),
          )
        : h("p", { class: "empty", id: "no-webhooks" }, "No webhook. Create one with POST /v1/projects/{project}/webhooks."),
    );
  }
}

export class WebhookPage implements View {
  readonly el = h("section", { class: "page webhook" });
  private readonly head = h("div", { class: "card", id: "webhook" });
  private readonly deliveries = h("div", { class: "card table-card", id: "deliveries-host" });
  private readonly pager = h("div", { class: "pager" });
  private readonly flash = h("div", {});
  private readonly abort = new AbortController();
  private timer?: number;
  private tokens: string[] = [];
  private token = "";
  private hook?: Webhook;

  constructor(
    private readonly project: string,
    private readonly id: string,
  ) {
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Webhook ", h("span", { class: "mono" }, id)), h("span", { class: "spacer" }), h("a", { href: href.webhooks(project) }, "← Webhooks")),
      this.flash,
      this.head,
      this.deliveries,
      this.pager,
    );
    this.deliveries.hidden = true;
    if (!canEdit()) {
      replace(this.head, viewerBox());
      return;
    }
    replace(this.head, h("p", { class: "muted" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private get base(): string {
    return `/v1/projects/${enc(this.project)}/webhooks/${enc(this.id)}`;
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const signal = this.abort.signal;
    try {
      const [w, list] = await Promise.all([get<Webhook>(this.base, signal), get<WebhookDeliveryList>(`${this.base}/deliveries${query({ pageSize: PAGE_SIZE, pageToken: this.token })}`, signal)]);
      if (signal.aborted) return;
      this.hook = w;
      this.renderHead(w);
      this.renderDeliveries(list);
    } catch (e) {
      if (signal.aborted) return;
      if (!this.hook) {
        replace(this.head, problemBox(e));
        return;
      }
      replace(this.flash, problemBox(e));
    }
    if (!this.token && !signal.aborted) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  private renderHead(w: Webhook): void {
    const toggle = h(
      "button",
      {
        id: "toggle-enabled",
        type: "button",
        class: w.enabled ? "danger" : "primary",
        onclick: () => {
          toggle.disabled = true;
          call<Webhook>("PATCH", this.base, { enabled: !w.enabled }, this.abort.signal)
            .then((nw) => {
              replace(this.flash);
              this.hook = nw;
              this.renderHead(nw);
            })
            .catch((e: unknown) => {
              toggle.disabled = false;
              replace(this.flash, h("div", { class: "alert error", role: "alert" }, `${w.enabled ? "Disable" : "Enable"} failed: ${message(e)}`));
            });
        },
      },
      w.enabled ? "Disable" : "Enable",
    );
    replace(
      this.head,
      h("div", { class: "card-title" }, h("h2", { class: "mono webhook-url", id: "webhook-url" }, w.url), enabledBadge(w), h("span", { class: "spacer" }), toggle),
      w.description ? h("p", { class: "desc" }, w.description) : null,
      h(
        "dl",
        { class: "meta" },
        h("dt", {}, "events"),
        h("dd", {}, events(w)),
        h("dt", {}, "pipeline"),
        h("dd", {}, w.pipeline ?? h("span", { class: "muted" }, "every run of the project")),
        h("dt", {}, "secret"),
        h("dd", { class: "muted" }, "set; never shown (PATCH a new one to rotate it)"),
        h("dt", {}, "created"),
        h("dd", {}, fmtTime(w.createdAt), w.createdBy ? ` by ${w.createdBy}` : ""),
        h("dt", {}, "updated"),
        h("dd", {}, fmtTime(w.updatedAt)),
      ),
      w.enabled ? null : h("div", { class: "alert warn" }, "Disabled: no event is queued for it, and its pending deliveries wait until it is enabled again."),
    );
  }

  private renderDeliveries(list: WebhookDeliveryList): void {
    this.deliveries.hidden = false;
    const p = this.project;
    replace(
      this.deliveries,
      h("div", { class: "card-title pad" }, h("h2", {}, "Deliveries"), h("span", { class: "muted small" }, `newest first, each with its attempts${this.token ? "" : ` · refreshes every ${REFRESH_MS / 1000}s`}`)),
      list.items.length
        ? h(
            "table",
            { class: "list", id: "deliveries" },
            h("thead", {}, h("tr", {}, ["Created", "Event", "Run", "State", "Attempts", "Last status", ""].map((c) => h("th", {}, c)))),
            list.items.map((d) =>
              h(
                "tbody",
                { class: "delivery", "data-delivery": d.id, "data-event": d.event, "data-state": DELIVERY_STATE[d.state] ?? d.state },
                h(
                  "tr",
                  { class: "delivery-row" },
                  h("td", { class: "nowrap" }, fmtTime(d.createdAt)),
                  h("td", { class: "mono nowrap" }, d.event),
                  h("td", {}, h("a", { class: "mono", href: href.run(p, d.runId, d.step) }, d.runId), d.step ? h("div", { class: "muted small" }, "step ", h("a", { href: href.run(p, d.runId, d.step) }, d.step)) : null),
                  h("td", {}, deliveryBadge(d.state)),
                  h("td", { class: "attempt-count" }, String(d.attempts)),
                  h("td", {}, statusCode(d.lastStatusCode)),
                  h(
                    "td",
                    { class: "small muted nowrap" },
                    d.state === "pending" && d.nextAttemptAt ? `next attempt ${fmtTime(d.nextAttemptAt)}` : d.finishedAt ? `finished ${fmtTime(d.finishedAt)}` : "",
                  ),
                ),
                h("tr", { class: "attempts-row" }, h("td", { colspan: 7 }, this.attempts(d))),
              ),
            ),
          )
        : h("p", { class: "empty", id: "no-deliveries" }, "No delivery yet: one is queued for each subscribed event of a run."),
    );
    const newer = h("button", { disabled: !this.tokens.length && !this.token, onclick: () => this.page(this.tokens.pop() ?? "") }, "← Newer");
    const older = h(
      "button",
      {
        disabled: !list.nextPageToken,
        onclick: () => {
          this.tokens.push(this.token);
          this.page(list.nextPageToken!);
        },
      },
      "Older →",
    );
    replace(this.pager, newer, older);
  }

  private attempts(d: WebhookDelivery): HTMLElement {
    if (!d.log.length) return h("p", { class: "muted small attempts-none" }, d.attempts ? "An attempt is in progress." : "Not tried yet.");
    return h(
      "table",
      { class: "list compact attempts" },
      h("thead", {}, h("tr", {}, ["Attempt", "Started", "Duration", "Status", "Error"].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        d.log.map((a: WebhookAttempt) =>
          h(
            "tr",
            { "data-attempt": String(a.attempt), "data-status": a.statusCode !== undefined ? String(a.statusCode) : "" },
            h("td", {}, `#${a.attempt}`),
            h("td", { class: "nowrap" }, fmtTime(a.startedAt)),
            h("td", { class: "nowrap duration" }, fmtMs(a.durationMs)),
            h("td", {}, statusCode(a.statusCode)),
            h("td", { class: "err" }, a.error ?? h("span", { class: "muted" }, "—")),
          ),
        ),
      ),
    );
  }

  private page(token: string): void {
    this.token = token;
    void this.load();
  }
}
