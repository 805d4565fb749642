//! The request behind a `data-api` form or button: confirm first when asked, keep it from
//! being sent twice, show what went wrong, and on success do what the element says
//! (`sw:success` event, then `data-reveal`, `data-redirect`, `data-stay` or a reload).

import { announce } from '../announce';
import { confirmAction } from '../confirm-dialog';
import { reveal } from '../key-reveal';
import { splitFailure } from './api-errors';
import { refreshParts } from './refresh';
import type { Failure } from './api-errors';
import { sendJson } from './api-request';
import { clearErrors, controlsNamed, formErrorElement, showFieldError } from './field-errors';
import { fillUrl } from './url-template';

type Source = HTMLFormElement | HTMLButtonElement;

/** Same-element requests never overlap: a second click while one is in flight is dropped. */
const inFlight = new WeakSet<Source>();

function setBusy(source: Source, busy: boolean): void {
  const buttons =
    source instanceof HTMLFormElement
      ? Array.from(source.querySelectorAll<HTMLButtonElement | HTMLInputElement>('button:not([type="button"]):not([type="reset"]), input[type="submit"]'))
      : [source];
  for (const b of buttons) b.disabled = busy;
  source.toggleAttribute('aria-busy', busy);
}

function showFailure(source: Source, failure: Failure): void {
  if (!(source instanceof HTMLFormElement)) {
    announce(splitFailure(failure, () => false).message ?? 'The request failed.', 'error');
    return;
  }
  const { fields, message } = splitFailure(failure, (name) => controlsNamed(source, name).length > 0);
  for (const [name, msg] of Object.entries(fields)) showFieldError(source, name, msg);
  if (message) formErrorElement(source).textContent = message;
  const firstInvalid = source.querySelector<HTMLElement>('[aria-invalid="true"]');
  firstInvalid?.focus();
}

/** What happens after a 2xx; false when the page stays (the element can be used again). */
function succeed(source: Source, status: number, body: unknown): boolean {
  const event = new CustomEvent('sw:success', { bubbles: true, cancelable: true, detail: { status, body } });
  if (!source.dispatchEvent(event)) return false;
  const d = source.dataset;
  if (d.successMessage) announce(d.successMessage);
  if (source instanceof HTMLFormElement && d.reveal) {
    // Never fall through to a reload here: it would lose a raw key that is shown only once.
    if (!reveal(source, body)) formErrorElement(source).textContent = 'Done, but this page cannot show the result.';
    else if (d.refresh) void refreshParts(d.refresh);
    return false;
  }
  if (d.redirect) {
    const url = fillUrl(d.redirect, body, location.href);
    if (url) {
      location.assign(url);
      return true;
    }
  }
  if ('stay' in d) {
    if (d.refresh) void refreshParts(d.refresh);
    return false;
  }
  location.reload();
  return true;
}

export async function runAction(source: Source, method: string, url: string, body?: unknown): Promise<void> {
  if (inFlight.has(source)) return;
  const question = source.dataset.confirm;
  const label = source.dataset.confirmLabel || (method === 'DELETE' ? 'Delete' : 'Confirm');
  if (question && !(await confirmAction(question, label))) return;
  inFlight.add(source);
  const focused = document.activeElement as HTMLElement | null;
  if (source instanceof HTMLFormElement) clearErrors(source);
  setBusy(source, true);
  const result = await sendJson(method, url, body);
  let leaving = false;
  if (result.ok) leaving = succeed(source, result.status, result.body);
  else showFailure(source, result.failure);
  // A page that is navigating away keeps its buttons disabled: no second request meanwhile.
  if (!leaving) {
    setBusy(source, false);
    inFlight.delete(source);
    // Disabling the focused button sent the focus to <body>; give it back.
    if (document.activeElement === document.body) focused?.focus();
  }
}
