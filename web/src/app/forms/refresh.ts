//! `data-refresh="#part, #other"` on a form: after its action succeeded, those parts of the page
//! are read again from the server (the page's own URL) and swapped in, so what the action
//! changed shows at once (a minted key in the list, a new channel and the rule forms it allows)
//! without reloading the page, which would lose what the action revealed (a raw key, a secret).

import { enhanceCharts } from '../charts/chart-figure';
import { localizeTimes } from '../local-time';

/** Replaces each element matching one of `selectors` with its copy in a fresh load of the page. */
export async function refreshParts(selectors: string): Promise<boolean> {
  let html: string;
  try {
    const res = await fetch(location.href, { credentials: 'same-origin', headers: { accept: 'text/html' } });
    if (!res.ok) return false;
    html = await res.text();
  } catch {
    return false;
  }
  // An inert document: nothing in it runs or loads.
  const fresh = new DOMParser().parseFromString(html, 'text/html');
  let all = true;
  for (const selector of selectors.split(',').map((s) => s.trim()).filter(Boolean)) {
    const current = document.querySelector(selector);
    const next = fresh.querySelector(selector);
    if (!current || !next) {
      all = false;
      continue;
    }
    const part = document.importNode(next, true) as Element;
    current.replaceWith(part);
    localizeTimes(part);
    enhanceCharts(part);
  }
  return all;
}
