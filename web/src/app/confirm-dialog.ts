//! `data-confirm`: asks before a destructive request, in a modal `<dialog>` (not
//! `window.confirm`, which cannot be styled, labelled or kept in the page's language).
//! Cancel has the focus first, Tab stays inside, Escape cancels, and focus returns to the
//! control that asked.

let dialog: HTMLDialogElement | null = null;

function build(): HTMLDialogElement {
  const d = document.createElement('dialog');
  d.className = 'confirm-dialog';
  d.setAttribute('aria-labelledby', 'sw-confirm-text');
  const form = document.createElement('form');
  form.method = 'dialog';
  const text = document.createElement('p');
  text.id = 'sw-confirm-text';
  const actions = document.createElement('div');
  actions.className = 'dialog-actions';
  const cancel = document.createElement('button');
  cancel.value = 'cancel';
  cancel.className = 'btn';
  cancel.textContent = 'Cancel';
  const ok = document.createElement('button');
  ok.value = 'confirm';
  ok.className = 'btn btn-danger';
  actions.append(cancel, ok);
  form.append(text, actions);
  d.append(form);
  // A modal dialog makes the page inert, but Tab can still leave to the browser's own UI;
  // wrapping keeps keyboard users on the two choices.
  d.addEventListener('keydown', (e) => {
    if (e.key !== 'Tab') return;
    const first = cancel;
    const last = ok;
    if (e.shiftKey && document.activeElement === first) {
      e.preventDefault();
      last.focus();
    } else if (!e.shiftKey && document.activeElement === last) {
      e.preventDefault();
      first.focus();
    }
  });
  document.body.append(d);
  return d;
}

/** Resolves true when the person confirms. `label` names the action on the confirm button. */
export function confirmAction(message: string, label: string): Promise<boolean> {
  dialog ??= build();
  const d = dialog;
  const opener = document.activeElement as HTMLElement | null;
  d.querySelector('p')!.textContent = message;
  d.querySelector<HTMLButtonElement>('button[value="confirm"]')!.textContent = label;
  d.returnValue = 'cancel';
  d.showModal();
  d.querySelector<HTMLButtonElement>('button[value="cancel"]')!.focus();
  return new Promise((resolve) => {
    d.addEventListener(
      'close',
      () => {
        opener?.focus();
        resolve(d.returnValue === 'confirm');
      },
      { once: true },
    );
  });
}
