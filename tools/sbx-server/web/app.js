// sbx's page: log in, manage projects, open a project's terminal. Plain
// DOM, no framework; every value from the server goes in as textContent.
// The tokens live in sessionStorage (this tab only) and never in a URL:
// the terminal's WebSocket carries the access token as a subprotocol entry.
"use strict";

const $ = (id) => document.getElementById(id);
const store = window.sessionStorage;

function say(text) {
  $("msg").textContent = text || "";
  $("msg").hidden = !text;
}

function show(view, where) {
  for (const v of ["login", "projects", "term"]) $(v).hidden = v !== view;
  $("where").textContent = where || "";
  $("logout").hidden = view === "login";
}

// One request; a 401 spends the refresh token once for a new pair.
async function api(method, path, body, retried) {
  const headers = {};
  const access = store.getItem("access");
  if (access) headers.authorization = "Bearer " + access;
  if (body !== undefined) headers["content-type"] = "application/json";
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401 && !retried && (await refresh())) {
    return api(method, path, body, true);
  }
  if (r.status === 401 && path.startsWith("/projects")) {
    logout();
    throw new Error("your session has ended: log in again");
  }
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) throw new Error((data && data.error && data.error.message) || r.statusText);
  return data;
}

async function refresh() {
  const token = store.getItem("refresh");
  if (!token) return false;
  const r = await fetch("/auth/refresh", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ refresh_token: token }),
  });
  if (!r.ok) return false;
  keep(await r.json());
  return true;
}

function keep(tokens) {
  store.setItem("access", tokens.access_token);
  store.setItem("refresh", tokens.refresh_token);
}

function logout() {
  const token = store.getItem("refresh");
  if (token && store.getItem("access")) {
    api("POST", "/auth/logout", { refresh_token: token }, true).catch(() => {});
  }
  store.clear();
  closeTerminal();
  location.hash = "#/";
  route();
}

// ---- log in

async function login(register) {
  const f = $("login-form");
  const creds = { email: f.email.value, password: f.password.value };
  say("");
  try {
    if (register) await api("POST", "/auth/register", creds, true);
    keep(await api("POST", "/auth/login", creds, true));
    f.password.value = "";
    route();
  } catch (e) {
    say(e.message);
  }
}

// ---- projects

function button(label, onclick, cls) {
  const b = document.createElement("button");
  b.textContent = label;
  if (cls) b.className = cls;
  b.addEventListener("click", async () => {
    b.disabled = true;
    say("");
    try {
      await onclick();
    } catch (e) {
      say(e.message);
    }
    b.disabled = false;
  });
  return b;
}

async function listProjects() {
  show("projects", "projects");
  const list = $("list");
  let projects;
  try {
    projects = await api("GET", "/projects");
  } catch (e) {
    say(e.message);
    return;
  }
  list.replaceChildren();
  for (const p of projects) {
    const li = document.createElement("li");
    li.dataset.id = p.id;
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = p.name;
    const st = document.createElement("span");
    st.className = "status " + p.status;
    st.textContent = p.status;
    if (p.status_reason) st.title = p.status_reason;
    li.append(name, st);
    const act = (verb) => async () => {
      await api("POST", `/projects/${p.id}/${verb}`);
      await listProjects();
    };
    if (p.status === "running") {
      li.append(button("Terminal", () => (location.hash = `#/t/${p.id}`)));
      li.append(button("Stop", act("stop"), "quiet"));
    } else if (p.status === "stopped" || p.status === "error") {
      li.append(button("Start", act("start")));
    }
    li.append(
      button(
        "Delete",
        async () => {
          if (!confirm(`Delete project ${p.name} and its sandbox?`)) return;
          await api("DELETE", `/projects/${p.id}`);
          await listProjects();
        },
        "danger",
      ),
    );
    list.append(li);
  }
  if (!projects.length) {
    const li = document.createElement("li");
    li.textContent = "No projects yet.";
    list.append(li);
  }
}

async function createProject(ev) {
  ev.preventDefault();
  const f = $("new-form");
  say("");
  try {
    await api("POST", "/projects", { name: f.name.value });
    f.name.value = "";
    await listProjects();
  } catch (e) {
    say(e.message);
  }
}

// ---- the terminal: ttyd's protocol over a WebSocket

let term = null;
let fit = null;
let sock = null;

function closeTerminal() {
  if (sock) {
    sock.dispose();
    sock = null;
  }
  if (term) {
    term.dispose();
    term = null;
  }
  window.removeEventListener("resize", refit);
}

function refit() {
  if (fit) fit.fit();
}

async function openTerminal(id) {
  closeTerminal();
  show("term", "");
  const state = $("term-state");
  $("term-bar").hidden = false;
  $("term-start").hidden = true;
  $("term-reconnect").hidden = true;
  let p;
  try {
    // Also renews an expired access token before the socket needs it.
    p = await api("GET", `/projects/${id}`);
  } catch (e) {
    say(e.message);
    return;
  }
  $("where").textContent = p.name;
  if (p.status !== "running") {
    state.textContent = `This project is ${p.status}.`;
    $("term-start").hidden = false;
    $("term-start").onclick = async () => {
      $("term-start").disabled = true;
      state.textContent = "Starting…";
      try {
        await api("POST", `/projects/${id}/start`);
      } catch (e) {
        say(e.message);
      }
      $("term-start").disabled = false;
      openTerminal(id);
    };
    return;
  }
  state.textContent = "";
  $("term-bar").hidden = true;
  term = new Terminal({ cursorBlink: true, scrollback: 5000, fontSize: 14 });
  fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open($("terminal"));
  fit.fit();
  window.addEventListener("resize", refit);

  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  // The token goes as a subprotocol entry, never in the URL.
  const protocols = ["tty", "bearer." + store.getItem("access")];
  sock = ttyConnect(`${scheme}//${location.host}/terminal/${id}`, protocols, term, (ev) => {
    $("term-bar").hidden = false;
    state.textContent = `Disconnected${ev.reason ? ": " + ev.reason : ""}.`;
    $("term-reconnect").hidden = false;
    $("term-reconnect").onclick = () => openTerminal(id);
  });
}

// ---- routing: #/ the projects, #/t/<id> a terminal (ids only, no tokens)

function route() {
  say("");
  if (!store.getItem("access")) {
    closeTerminal();
    show("login", "");
    return;
  }
  const m = location.hash.match(/^#\/t\/([0-9a-f-]{36})$/);
  if (m) {
    openTerminal(m[1]);
  } else {
    closeTerminal();
    listProjects();
  }
}

$("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  login(false);
});
$("register-btn").addEventListener("click", () => {
  if ($("login-form").reportValidity()) login(true);
});
$("new-form").addEventListener("submit", createProject);
$("logout").addEventListener("click", logout);
window.addEventListener("hashchange", route);
route();
