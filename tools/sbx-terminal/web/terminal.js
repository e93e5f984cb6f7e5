// sbx-run terminal's page: one terminal, ttyd's protocol over a WebSocket.
// The one-time token arrives in the URL's fragment (never sent in a
// request line, so no log keeps it), is taken out of the address bar at
// once and exchanged for an HttpOnly session cookie; a reload or a
// reconnect then uses the cookie alone.
"use strict";

const $ = (id) => document.getElementById(id);
const enc = new TextEncoder();
const dec = new TextDecoder();
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

// A client frame: the kind ('0' input, '1' resize), then its bytes.
function send(kind, body) {
  if (!sock || sock.readyState !== WebSocket.OPEN) return;
  const msg = new Uint8Array(body.length + 1);
  msg[0] = kind.charCodeAt(0);
  msg.set(body, 1);
  sock.send(msg);
}

function connect() {
  $("reconnect").hidden = true;
  say("");
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  sock = new WebSocket(`${scheme}//${location.host}/terminal`, ["tty"]);
  sock.binaryType = "arraybuffer";
  sock.onopen = () => {
    sock.send(enc.encode(JSON.stringify({ AuthToken: "", columns: term.cols, rows: term.rows })));
    term.focus();
  };
  sock.onmessage = (ev) => {
    const d = new Uint8Array(ev.data);
    if (d[0] === 0x30) term.write(d.subarray(1));
    else if (d[0] === 0x31) document.title = dec.decode(d.subarray(1));
  };
  sock.onclose = (ev) => {
    say(`Disconnected${ev.reason ? ": " + ev.reason : ""}.`);
    $("reconnect").hidden = false;
  };
}

async function main() {
  if (!(await exchange())) return;
  term = new Terminal({ cursorBlink: true, scrollback: 5000, fontSize: 14 });
  fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open($("terminal"));
  fit.fit();
  window.addEventListener("resize", () => fit.fit());
  term.onData((s) => send("0", enc.encode(s)));
  term.onBinary((s) => send("0", Uint8Array.from(s, (c) => c.charCodeAt(0))));
  term.onResize(({ cols, rows }) => send("1", enc.encode(JSON.stringify({ columns: cols, rows }))));
  $("reconnect").onclick = connect;
  connect();
}

main();
