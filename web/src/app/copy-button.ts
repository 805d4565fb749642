//! `<button data-copy="#selector">`: copies the target's text (an input's value) and says so.

import { announce } from './announce';

function textOf(target: Element): string {
  if (target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement) return target.value;
  return (target.textContent ?? '').trim();
}

/** Without clipboard access the text is at least selected, ready for Ctrl+C. */
function select(target: Element): void {
  if (target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement) {
    target.select();
    return;
  }
  const range = document.createRange();
  range.selectNodeContents(target);
  getSelection()?.removeAllRanges();
  getSelection()?.addRange(range);
}

export function initCopyButtons(): void {
  document.addEventListener('click', async (e) => {
    const button = (e.target as Element).closest?.('button[data-copy]');
    if (!(button instanceof HTMLButtonElement)) return;
    const target = document.querySelector(button.dataset.copy ?? '');
    if (!target) return;
    try {
      await navigator.clipboard.writeText(textOf(target));
      announce('Copied');
    } catch {
      select(target);
      announce('Could not copy: the text is selected, press Ctrl+C to copy it.', 'error');
    }
  });
}
