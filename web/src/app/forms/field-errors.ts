//! Shows the API's messages where they belong: beside the field (`[data-error-for]`, made if
//! the page has none), tied to it with `aria-invalid` and `aria-describedby`, and one
//! form-level message (`[data-form-error]`, a `role="alert"`) for the rest.

let made = 0;

type Control = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

/** The controls of one name (a radio or checkbox group has several). */
export function controlsNamed(form: HTMLFormElement, name: string): Control[] {
  return (Array.from(form.elements) as Control[]).filter((el) => el.name === name && !el.disabled);
}

function messageElement(form: HTMLFormElement, name: string, controls: Control[]): HTMLElement {
  const given = Array.from(form.querySelectorAll<HTMLElement>('[data-error-for]')).find(
    (el) => el.dataset.errorFor === name,
  );
  if (given) return given;
  const el = document.createElement('p');
  el.className = 'field-error';
  el.dataset.errorFor = name;
  el.dataset.made = '';
  // After the group's fieldset or the wrapping label, so the message reads after the field.
  const last = controls[controls.length - 1];
  const anchor = (controls.length > 1 && last.closest('fieldset')) || last.closest('label') || last;
  anchor.after(el);
  return el;
}

/** The form-level message element, made (at the top of the form) if the page has none. */
export function formErrorElement(form: HTMLFormElement): HTMLElement {
  let el = form.querySelector<HTMLElement>('[data-form-error]');
  if (!el) {
    el = document.createElement('div');
    el.className = 'form-error';
    el.dataset.formError = '';
    form.prepend(el);
  }
  el.classList.add('form-error');
  el.setAttribute('role', 'alert');
  return el;
}

export function showFieldError(form: HTMLFormElement, name: string, message: string): void {
  const controls = controlsNamed(form, name);
  const el = messageElement(form, name, controls);
  el.id ||= `sw-error-${++made}`;
  el.textContent = message;
  for (const c of controls) {
    c.setAttribute('aria-invalid', 'true');
    const ids = (c.getAttribute('aria-describedby') ?? '').split(' ').filter(Boolean);
    if (!ids.includes(el.id)) c.setAttribute('aria-describedby', [...ids, el.id].join(' '));
  }
}

/** Clears one field's message (when it is edited) or, without a name, every message. */
export function clearErrors(form: HTMLFormElement, name?: string): void {
  const selector = name === undefined ? '[data-error-for]' : `[data-error-for="${CSS.escape(name)}"]`;
  for (const el of Array.from(form.querySelectorAll<HTMLElement>(selector))) {
    for (const c of controlsNamed(form, el.dataset.errorFor ?? '')) {
      c.removeAttribute('aria-invalid');
      const ids = (c.getAttribute('aria-describedby') ?? '').split(' ').filter((id) => id && id !== el.id);
      if (ids.length) c.setAttribute('aria-describedby', ids.join(' '));
      else c.removeAttribute('aria-describedby');
    }
    if ('made' in el.dataset) el.remove();
    else el.textContent = '';
  }
  if (name === undefined) {
    const formError = form.querySelector<HTMLElement>('[data-form-error]');
    if (formError) formError.textContent = '';
  }
}
