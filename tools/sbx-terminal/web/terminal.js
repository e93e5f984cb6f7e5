// sbx-run terminal's page: one terminal, ttyd's protocol over a WebSocket.
// The one-time token arrives in the URL's fragment (never sent in a
// request line, so no log keeps it), is taken out of the address bar at
// once and exchanged for an HttpOnly session cookie; a reload or a
// reconnect then uses the cookie alone.
"use strict";

const $ = (id) => document.getElementById(id);
let term = null;
let fit = null;
let sock = null;

function say(text) {
  $("bar").hidden = !text;
  $("state").textContent = text;
}

async function exchange() {
  const m = location.hash.match(/^#token=([0-9a-f]+)$/);
  if (!m) return true;
  history.replaceState(null, "", "/");
  const r = await fetch("/session", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ token: m[1] }),
    credentials: "same-origin",
  });
  if (r.ok) return true;
  say((await r.text()) || `The link was refused (${r.status}).`);
  return false;
}

function connect() {
  if (sock) sock.dispose();
  $("reconnect").hidden = true;
  say("");
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  sock = ttyConnect(`${scheme}//${location.host}/terminal`, ["tty"], term, (ev) => {
    say(`Disconnected${ev.reason ? ": " + ev.reason : ""}.`);
    $("reconnect").hidden = false;
  });
}

async function main() {
  if (!(await exchange())) return;
  term = new Terminal({ cursorBlink: true, scrollback: 5000, fontSize: 14 });
  fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open($("terminal"));
  fit.fit();
  window.addEventListener("resize", () => fit.fit());
  $("reconnect").onclick = connect;
  connect();
}

main();
