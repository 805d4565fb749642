//! `<form data-api="POST|PATCH|DELETE" action="/api/v1/...">` and
//! `<button data-api="DELETE" data-href="/api/v1/...">`: sent as JSON by fetch instead of
//! the browser's form post. Listeners sit on the document, so forms and buttons added later
//! (a revealed template) work too.

import { clearErrors } from './field-errors';
import { runAction } from './api-action';
import { readFields } from './read-fields';
import { serializeFields } from './serialize';

const METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

function method(value: string | undefined): string | null {
  const m = (value ?? '').toUpperCase();
  return METHODS.has(m) ? m : null;
}

export function initApiForms(): void {
  document.addEventListener('submit', (e) => {
    const form = e.target;
    if (!(form instanceof HTMLFormElement)) return;
    const m = method(form.dataset.api);
    if (!m) return;
    e.preventDefault();
    const url = form.getAttribute('action') ?? location.pathname;
    void runAction(form, m, url, m === 'DELETE' ? undefined : serializeFields(readFields(form)));
  });

  // An edited field's message no longer describes it.
  document.addEventListener('input', (e) => {
    const el = e.target as HTMLInputElement;
    if (el.form?.dataset.api && el.name && el.getAttribute('aria-invalid') === 'true') clearErrors(el.form, el.name);
  });

  document.addEventListener('click', (e) => {
    const button = (e.target as Element).closest?.('button[data-api]');
    if (!(button instanceof HTMLButtonElement)) return;
    const m = method(button.dataset.api);
    const url = button.dataset.href;
    if (!m || !url) return;
    e.preventDefault();
    // `data-body` is written by the template, not by users: a broken one should fail loudly.
    const body: unknown = button.dataset.body ? JSON.parse(button.dataset.body) : undefined;
    void runAction(button, m, url, body);
  });
}
