// The landing page's waitlist form (web/index.html): posts the e-mail to /api/waitlist.
const form = document.getElementById('waitlist');
const msg = document.getElementById('msg');
form.addEventListener('submit', async (e) => {
  e.preventDefault();
  const email = new FormData(form).get('email');
  try {
    const r = await fetch('/api/waitlist', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email }),
    });
    msg.textContent = r.status === 204 ? 'Thanks — you are on the list.' : 'Please check the address.';
  } catch {
    msg.textContent = 'Could not reach the server; please try again.';
  }
});
