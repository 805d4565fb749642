//! `<form method="get" data-autosubmit>`: filters apply as soon as they change. The form stays
//! a plain GET, so the page URL is the shareable state and the page works without script.

export function initAutosubmit(): void {
  document.addEventListener('change', (e) => {
    const form = (e.target as HTMLInputElement).form;
    if (form?.hasAttribute('data-autosubmit')) form.requestSubmit();
  });
}
