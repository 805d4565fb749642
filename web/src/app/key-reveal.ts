//! `data-reveal="#template"` on the key-minting form: the raw key exists only in the POST's
//! answer and is never shown again, so it goes straight into the page from a `<template>` —
//! never into storage or the URL — and takes the focus, so it is seen and read out.

import { fillUrl } from './forms/url-template';
import { localizeTimes } from './local-time';

/**
 * Fills every `[data-field="name"]` in `root` from the body: inputs by value, times by datetime,
 * others by text; and every link's `data-field-href` template (`/app/alerts?channel={id}`) into
 * its `href` (same origin only, values URL-encoded).
 */
export function fillFields(root: ParentNode, body: Record<string, unknown>): void {
  root.querySelectorAll<HTMLAnchorElement>('a[data-field-href]').forEach((a) => {
    const url = fillUrl(a.dataset.fieldHref ?? '', body, location.href);
    if (url) a.href = url;
  });
  root.querySelectorAll<HTMLElement>('[data-field]').forEach((el) => {
    const v = body[el.dataset.field ?? ''];
    const text = v == null ? '' : String(v);
    if (el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement) el.value = text;
    else if (el instanceof HTMLTimeElement) {
      el.dateTime = text;
      el.textContent = text;
    } else el.textContent = text;
  });
}

/** Shows the filled template right after the form (replacing an earlier one) and focuses it. */
export function reveal(form: HTMLFormElement, body: unknown): boolean {
  const template = document.querySelector(form.dataset.reveal ?? '');
  if (!(template instanceof HTMLTemplateElement)) return false;
  const next = form.nextElementSibling;
  if (next instanceof HTMLElement && 'revealed' in next.dataset) next.remove();
  const box = document.createElement('div');
  box.className = 'reveal';
  box.dataset.revealed = '';
  box.tabIndex = -1;
  box.append(template.content.cloneNode(true));
  fillFields(box, (body ?? {}) as Record<string, unknown>);
  localizeTimes(box);
  form.after(box);
  form.reset();
  box.focus();
  return true;
}
