// The page of "kubectl vm console --browser": it connects the SPICE HTML5
// client to the command's bridge and says plainly why a connection ends.
import * as Spice from './spice-html5/src/main.js';

const $ = (id) => document.getElementById(id);
let session = null;
let sc = null;
let notice = null; // from the command: why the display's connection ended
let failure = null; // the client's own error
let commandGone = false;
let noSession = null; // the command's answer when it gave this page no password

function wsURL(name) {
  const u = new URL(name, window.location.href);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  return u.href;
}

function again() {
  return session ? `For a new connection, run: ${session.command}` : '';
}

// render shows the state: body[data-state] for tests and styles, the
// status line, and a message when something went wrong.
function render() {
  let state = document.body.dataset.state;
  let text = null;
  const ended = 'kubectl vm console has ended: this page no longer reaches the VM.';
  if (noSession) {
    state = noSession.status === 410 ? 'taken' : 'failed';
    text = noSession.text;
  } else if (notice) {
    state = notice.kind;
    text = `${notice.message}\n${again()}`;
  } else if (failure && failure.message === 'Permission denied.') {
    state = 'refused';
    text = `The VM's display refused the password. A password from kubectl vm console lets a client ` +
      `log in only within ${session.expiry}s of being given out, and a newer console replaces it: ` +
      `this one is spent.\n${again()}`;
  } else if (commandGone) {
    // Ctrl-C, or the command failed: its end closed the connections.
    state = 'ended';
    text = `${ended}\n${again()}`;
  } else if (failure) {
    state = 'dropped';
    text = `The connection to the VM's display ended (${failure.message}): another console may have taken ` +
      `it over (the display serves one client at a time), or the network dropped.\n${again()}`;
  }
  if (commandGone && state !== 'ended') {
    text += `\n${ended}`;
  }
  document.body.dataset.state = state;
  $('status').textContent = {
    loading: 'Loading…', connecting: 'Connecting…', connected: 'Connected',
    refused: 'Password refused', stopped: 'VM stopped', dropped: 'Disconnected',
    unreachable: 'Display unreachable', ended: 'Ended', failed: 'Page failed',
    taken: 'Password given to another page',
  }[state] || state;
  $('message').hidden = text === null;
  $('message').textContent = text || '';
  $('ctrl-alt-del').disabled = state !== 'connected';
}

// pendingFor is how long a refused password is tried again when no
// status confirmed that the VM took it (GitOps mode): the runner applies
// it a moment after the command wrote it.
const pendingFor = 15000;
const loaded = Date.now();

function onError(e) {
  if (sc) sc.stop();
  if (e.message === 'Permission denied.' && session.pending && Date.now() - loaded < pendingFor) {
    $('status').textContent = 'Waiting for the VM to take the new password…';
    window.setTimeout(connect, 1000);
    return;
  }
  if (failure === null) failure = e;
  render();
}

function onAgent() {
  // The guest's SPICE agent follows the window's size.
  window.spice_connection = this;
  window.addEventListener('resize', Spice.handle_resize);
  Spice.resize_helper(this);
}

// inputsReady says "connected" once the keyboard and mouse channel is:
// spice-html5 drops what is typed before.
function inputsReady() {
  if (failure || notice) return;
  if (!sc.inputs || sc.inputs.state !== 'ready') {
    window.setTimeout(inputsReady, 100);
    return;
  }
  document.body.dataset.state = 'connected';
  render();
}

function events() {
  const ws = new WebSocket(wsURL('events'));
  ws.onmessage = (e) => {
    notice = JSON.parse(e.data);
    render();
  };
  ws.onclose = () => {
    commandGone = true;
    render();
  };
}

function connect() {
  sc = new Spice.SpiceMainConn({
    uri: wsURL('spice'),
    screen_id: 'spice-screen',
    password: session.password,
    onerror: onError,
    onsuccess: inputsReady,
    onagent: onAgent,
  });
  // spice-html5's sendCtrlAltDel reads the connection from window.sc.
  window.sc = sc;
}

// loadSession gets the session from the command, which gives its
// password once, and keeps it in the tab for a reload; null when the
// command gave none.
async function loadSession() {
  const key = `session ${window.location.pathname}`;
  const kept = window.sessionStorage.getItem(key);
  if (kept) return JSON.parse(kept);
  const resp = await fetch('session', { cache: 'no-store' });
  if (!resp.ok) {
    noSession = { status: resp.status, text: (await resp.text()).trim() };
    return null;
  }
  const s = await resp.json();
  window.sessionStorage.setItem(key, JSON.stringify(s));
  return s;
}

async function main() {
  session = await loadSession();
  if (!session) {
    render();
    return;
  }
  document.title = `${session.namespace}/${session.vm} – VM console`;
  $('title').textContent = `vm ${session.namespace}/${session.vm}`;
  $('client').textContent = session.client;
  events();
  document.body.dataset.state = 'connecting';
  render();
  connect();
  $('ctrl-alt-del').onclick = () => {
    Spice.sendCtrlAltDel();
    const canvas = document.querySelector('#spice-screen canvas');
    if (canvas) canvas.focus();
  };
}

// The session's fetch fails when the command has ended.
main().catch((e) => window.loadFailed(e.message));
