// ttyd's protocol between an xterm.js terminal and a WebSocket, shared by
// sbx-server's page and sbx-run terminal's: the client's JSON hello, then
// '0'+input and '1'+resize; the server's '0'+output and '1'+title.
"use strict";

// Connect `term` to `url`; onClose(ev) when the socket closes. Returns
// { dispose() }, which closes the socket (without onClose) and lets go of
// the terminal's events, so the terminal can be connected again.
function ttyConnect(url, protocols, term, onClose) {
  const enc = new TextEncoder();
  const dec = new TextDecoder();
  const sock = new WebSocket(url, protocols);
  sock.binaryType = "arraybuffer";
  const send = (kind, body) => {
    if (sock.readyState !== WebSocket.OPEN) return;
    const msg = new Uint8Array(body.length + 1);
    msg[0] = kind.charCodeAt(0);
    msg.set(body, 1);
    sock.send(msg);
  };
  sock.onopen = () => {
    // ttyd's hello; any credential already went with the upgrade.
    sock.send(enc.encode(JSON.stringify({ AuthToken: "", columns: term.cols, rows: term.rows })));
    term.focus();
  };
  sock.onmessage = (ev) => {
    const d = new Uint8Array(ev.data);
    if (d[0] === 0x30) term.write(d.subarray(1));
    else if (d[0] === 0x31) document.title = dec.decode(d.subarray(1));
  };
  sock.onclose = onClose;
  const subs = [
    term.onData((s) => send("0", enc.encode(s))),
    term.onBinary((s) => send("0", Uint8Array.from(s, (c) => c.charCodeAt(0)))),
    term.onResize(({ cols, rows }) => send("1", enc.encode(JSON.stringify({ columns: cols, rows })))),
  ];
  return {
    dispose() {
      subs.forEach((s) => s.dispose());
      sock.onclose = null;
      sock.close();
    },
  };
}
