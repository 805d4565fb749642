//! One polite live region that doubles as the toast area: what it shows is also read out
//! ("Copied", "Key revoked", a failed action). It is in the page from the start, since screen
//! readers announce changes to a live region, not a region that appears with its text.

let region: HTMLElement | null = null;
let timer = 0;

export function initAnnouncer(): void {
  region = document.createElement('div');
  region.className = 'toast-region';
  region.setAttribute('role', 'status');
  region.setAttribute('aria-live', 'polite');
  document.body.append(region);
}

/** Shows and announces a short message; errors stay longer, since they need reading. */
export function announce(message: string, tone: 'info' | 'error' = 'info'): void {
  if (!region) return;
  const toast = document.createElement('p');
  toast.className = `toast toast-${tone}`;
  toast.textContent = message;
  region.replaceChildren(toast);
  clearTimeout(timer);
  timer = window.setTimeout(() => toast.remove(), tone === 'error' ? 10_000 : 4_000);
}
