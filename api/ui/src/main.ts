// Entry point: the login form, the page shell and the router.

import { ApiError, call, getToken, lastProject, logout, rememberProject, setOnUnauthorized, setToken } from "./api";
import { h, replace } from "./dom";
import { href, parse, type Route } from "./route";
import { clearSession, loadSession, sessionLoaded, whoami } from "./session";
import type { Project } from "./types";
import { CachePage } from "./views/cache";
import { ClusterPage, ClustersPage } from "./views/clusters";
import { ComparePage } from "./views/compare";
import { EndpointPage, EndpointsPage } from "./views/endpoints";
import { LaunchPage } from "./views/launch";
import { ModelPage, ModelsPage } from "./views/models";
import { PipelinePage, PipelinesPage } from "./views/pipelines";
import { RunPage } from "./views/run";
import { RunsPage } from "./views/runs";
import { SchedulesPage } from "./views/schedules";
import { SecretsPage } from "./views/secrets";
import { TriggerPage, TriggersPage } from "./views/triggers";
import type { View } from "./views/view";
import { WebhookPage, WebhooksPage } from "./views/webhooks";

const app = document.getElementById("app")!;
let projects: Project[] = [];
let view: View | undefined;
let afterLogin = "";

setOnUnauthorized(() => {
  logout();
  clearSession();
  projects = [];
  if (parse(location.hash).page !== "login") {
    afterLogin = location.hash;
    location.hash = "#/login";
  }
});

window.addEventListener("hashchange", () => void route());
void route();

async function route(): Promise<void> {
  const r = parse(location.hash);
  if (r.page === "login" || !getToken()) {
    if (r.page !== "login") afterLogin = location.hash;
    show(loginView());
    return;
  }
  if (!projects.length || !sessionLoaded()) {
    try {
      // Who the token is (its role decides what the pages offer), once per session.
      const [list] = await Promise.all([call<{ projects: Project[] }>("GET", "/v1/projects"), sessionLoaded() ? undefined : loadSession()]);
      projects = list.projects;
    } catch (e) {
      show(errorView(e));
      return;
    }
  }
  if (r.page === "home") {
    const p = projects.find((x) => x.name === lastProject()) ?? projects[0];
    if (!p) {
      show(errorView(new Error("this token sees no project")));
      return;
    }
    location.replace(href.runs(p.name));
    return;
  }
  rememberProject(r.project);
  if (view?.update?.(r)) return;
  show(shell(r, page(r)));
}

function page(r: Exclude<Route, { page: "login" | "home" }>): View {
  switch (r.page) {
    case "runs":
      return new RunsPage(r.project, r.filters);
    case "run":
      return new RunPage(r);
    case "pipelines":
      return new PipelinesPage(r.project);
    case "pipeline":
      return new PipelinePage(r.project, r.pipeline, r.version);
    case "launch":
      return new LaunchPage(r);
    case "compare":
      return new ComparePage(r.project, r.runs);
    case "schedules":
      return new SchedulesPage(r.project, r.focus);
    case "endpoints":
      return new EndpointsPage(r.project);
    case "endpoint":
      return new EndpointPage(r.project, r.endpoint);
    case "models":
      return new ModelsPage(r.project);
    case "model":
      return new ModelPage(r.project, r.model);
    case "clusters":
      return new ClustersPage(r.project, projects);
    case "cluster":
      return new ClusterPage(r.project, r.cluster);
    case "cache":
      return new CachePage(r.project, r.filters);
    case "webhooks":
      return new WebhooksPage(r.project);
    case "webhook":
      return new WebhookPage(r.project, r.webhook);
    case "triggers":
      return new TriggersPage(r.project);
    case "trigger":
      return new TriggerPage(r.project, r.trigger);
    case "secrets":
      return new SecretsPage(r.project);
  }
}

function show(v: View): void {
  view?.dispose();
  view = v;
  replace(app, v.el);
}

/** shell wraps a page in the top bar (project, sections, log out). */
function shell(r: Exclude<Route, { page: "login" | "home" }>, inner: View): View {
  const sections: Record<string, string> = { pipeline: "pipelines", launch: "pipelines", cluster: "clusters", webhook: "webhooks", endpoint: "endpoints", trigger: "triggers", model: "models" };
  const section = sections[r.page] ?? (["pipelines", "schedules", "models", "endpoints", "clusters", "cache", "webhooks", "triggers", "secrets"].includes(r.page) ? r.page : "runs");
  const projectPicker =
    projects.length > 1
      ? h(
          "select",
          {
            id: "project",
            "aria-label": "project",
            onchange: ((ev: Event) => {
              location.hash = href.runs((ev.target as HTMLSelectElement).value);
            }) as EventListener,
          },
          projects.map((p) => h("option", { value: p.name, selected: p.name === r.project }, p.name)),
        )
      : h("span", { class: "project" }, r.project);
  const el = h(
    "div",
    { class: "shell" },
    h(
      "header",
      { class: "top" },
      h("a", { class: "brand", href: href.runs(r.project) }, "Atelier"),
      projectPicker,
      h(
        "nav",
        {},
        h("a", { href: href.runs(r.project), class: section === "runs" ? "active" : "" }, "Runs"),
        h("a", { href: href.pipelines(r.project), class: section === "pipelines" ? "active" : "" }, "Pipelines"),
        h("a", { href: href.schedules(r.project), class: section === "schedules" ? "active" : "", id: "nav-schedules" }, "Schedules"),
        h("a", { href: href.triggers(r.project), class: section === "triggers" ? "active" : "", id: "nav-triggers" }, "Triggers"),
        h("a", { href: href.models(r.project), class: section === "models" ? "active" : "", id: "nav-models" }, "Models"),
        h("a", { href: href.endpoints(r.project), class: section === "endpoints" ? "active" : "", id: "nav-endpoints" }, "Endpoints"),
        h("a", { href: href.clusters(r.project), class: section === "clusters" ? "active" : "", id: "nav-clusters" }, "Clusters"),
        h("a", { href: href.cache(r.project), class: section === "cache" ? "active" : "", id: "nav-cache" }, "Cache"),
        h("a", { href: href.webhooks(r.project), class: section === "webhooks" ? "active" : "", id: "nav-webhooks" }, "Webhooks"),
        h("a", { href: href.secrets(r.project), class: section === "secrets" ? "active" : "", id: "nav-secrets" }, "Secrets"),
      ),
      h("span", { class: "spacer" }),
      whoamiBadge(),
      h(
        "button",
        {
          class: "link",
          id: "logout",
          onclick: () => {
            logout();
            clearSession();
            projects = [];
            location.hash = "#/login";
          },
        },
        "Log out",
      ),
    ),
    h("main", {}, inner.el),
  );
  return { el, dispose: () => inner.dispose(), update: (nr) => inner.update?.(nr) ?? false };
}

/** whoamiBadge names the signed-in token and its role in the top bar (nothing when the gateway did not say). */
function whoamiBadge(): HTMLElement | null {
  const me = whoami();
  if (!me) return null;
  const scope = me.project ? `a token of project ${me.project}` : "a token of every project";
  return h(
    "span",
    { class: "whoami", id: "whoami", title: `Signed in with ${scope}, role ${me.role} (token ID ${me.id})` },
    h("span", { class: "whoami-name", id: "whoami-name" }, me.name),
    h("span", { class: "token-role", id: "whoami-role", "data-role": me.role }, me.role),
  );
}

function loginView(): View {
  const input = h("input", { id: "token", type: "password", autocomplete: "off", spellcheck: "false", placeholder: "atl_…", required: true, "aria-label": "API token" });
  const msg = h("p", { class: "error", role: "alert" });
  const form = h(
    "form",
    {
      class: "login",
      method: "post",
      onsubmit: ((ev: Event) => {
        ev.preventDefault();
        const t = input.value.trim();
        msg.textContent = "";
        clearSession();
        Promise.all([call<{ projects: Project[] }>("GET", "/v1/projects", undefined, undefined, t), loadSession(t)])
          .then(([res]) => {
            setToken(t);
            projects = res.projects;
            const next = afterLogin && parse(afterLogin).page !== "login" ? afterLogin : "#/";
            afterLogin = "";
            if (location.hash === next) void route();
            else location.hash = next;
          })
          .catch((e: unknown) => {
            clearSession();
            msg.textContent = e instanceof ApiError && e.status === 401 ? `Token refused: ${e.message}` : String(e instanceof Error ? e.message : e);
          });
      }) as EventListener,
    },
    h("h1", {}, "Atelier"),
    h("label", { for: "token" }, "API token"),
    input,
    h("button", { type: "submit", id: "login", class: "primary" }, "Sign in"),
    msg,
    h(
      "p",
      { class: "hint" },
      "Paste an API token (",
      h("code", {}, "make dev"),
      " writes an admin token to ",
      h("code", {}, ".atelier/admin-token"),
      "). It is kept in this tab's session storage only and sent in the Authorization header.",
    ),
  );
  setTimeout(() => input.focus(), 0);
  return { el: h("div", { class: "login-page" }, form), dispose: () => {} };
}

function errorView(e: unknown): View {
  return {
    el: h(
      "div",
      { class: "login-page" },
      h("div", { class: "login" }, h("h1", {}, "Atelier"), h("p", { class: "error" }, e instanceof Error ? e.message : String(e)), h("a", { href: "#/login" }, "Sign in again")),
    ),
    dispose: () => {},
  };
}
