// The signed-in token as the gateway sees it (GET /v1/whoami): its name
// and role, read once per page load and again after a sign-in, forgotten
// at sign-out. Views ask can(role) before offering an action: a viewer is
// not shown buttons and forms whose request the gateway would refuse.
//
// This is presentation only. Every request still carries the token and
// the gateway checks its role (x-atelier-role in api/openapi.yaml): what
// the page hides, the gateway refuses anyway.

import { ApiError, call } from "./api";
import { h } from "./dom";
import type { Role, Token } from "./types";

const RANK: Record<Role, number> = { viewer: 1, editor: 2, admin: 3 };

let me: Token | undefined;
let loaded = false;

/**
 * loadSession reads whoami (with token, or the stored one). A failure
 * other than a 401 (which signs out, through api.ts) leaves the role
 * unknown: the page then offers every action, as the gateway decides.
 */
export async function loadSession(token?: string): Promise<void> {
  try {
    me = await call<Token>("GET", "/v1/whoami", undefined, undefined, token);
  } catch (e) {
    me = undefined;
    if (e instanceof ApiError && e.status === 401) throw e;
  }
  loaded = true;
}

/** sessionLoaded says whether whoami was read since the last sign-in. */
export function sessionLoaded(): boolean {
  return loaded;
}

export function clearSession(): void {
  me = undefined;
  loaded = false;
}

/** whoami is the signed-in token (undefined when the gateway did not say). */
export function whoami(): Token | undefined {
  return me;
}

/** can says whether the token's role is at least role (true when unknown: the gateway decides). */
export function can(role: Role): boolean {
  return !me || RANK[me.role] >= RANK[role];
}

/** canEdit: the token may change things in its project (editor or admin). */
export const canEdit = (): boolean => can("editor");

/** needs says what a hidden action needs: "needs an editor token; this one (ci-viewer) is a viewer". */
export function needs(role: Role, what: string): string {
  const who = me ? `; this token (${me.name}) is ${article(me.role)} ${me.role}` : "";
  return `${what} needs ${article(role)} ${role} token${role === "editor" ? " of this project (or an admin's)" : ""}${who}.`;
}

const article = (r: Role): string => (r === "viewer" ? "a" : "an");

/** roleNote is a muted line saying what a viewer is not offered on a page, and why. */
export function roleNote(role: Role, what: string, id?: string): HTMLElement {
  return h("p", { class: "role-note", id, "data-needs": role }, needs(role, what));
}
