// A classic script, run before console.js: when a module of the page does
// not load, nothing of console.js runs to say so, and the page would show
// "Loading…" for ever. loadFailed says what failed and what to do.
function loadFailed(what) {
  document.body.dataset.state = 'failed';
  document.getElementById('status').textContent = 'Page failed';
  const m = document.getElementById('message');
  m.textContent = `The page could not start (${what}). Reload it; if kubectl vm console --browser ` +
    'has ended, run it again for a new page.';
  m.hidden = false;
}

// Capture: a script element's error does not bubble.
window.addEventListener('error', (e) => {
  if (document.body.dataset.state !== 'loading') return;
  if (e.target instanceof HTMLScriptElement) {
    loadFailed(`${e.target.src} or a module it imports did not load`);
  } else if (e.message) {
    loadFailed(e.message);
  }
}, true);
