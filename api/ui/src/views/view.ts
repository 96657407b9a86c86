import { ApiError } from "../api";
import { h } from "../dom";
import type { Route } from "../route";

/** View is one page: its element, and what to stop when it goes away. */
export interface View {
  el: HTMLElement;
  dispose(): void;
  /** update takes a route change that stays on the page (e.g. another step of the same run); false: rebuild. */
  update?(r: Route): boolean;
}

/** message is what a failed call says to the user (the problem's detail). */
export function message(e: unknown): string {
  if (e instanceof ApiError) return `${e.message} (HTTP ${e.status})`;
  return e instanceof Error ? e.message : String(e);
}

export function errorBox(e: unknown): HTMLElement {
  return h("div", { class: "alert error", role: "alert" }, message(e));
}
