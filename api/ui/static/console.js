// cmq web console: reads the public JSON API of the node serving it (/v1/whoami, /v1/status,
// /v1/queues, /v1/queues/{name}, /v1/queues/{name}/messages?peek=N, /readyz) every POLL_MS and
// renders a cluster map, this node's clock/repair/disk state, a queue table with rate charts,
// and a queue page (its priority levels with the visible messages at each, its tenants, a send
// form with a priority, an attributes form for the levels; purge, rewind and redrive for keys
// granted admin). No framework, no build step.
//
// Against a node that asks for signatures it first asks for an access key, keeps it in this
// tab's sessionStorage only, and signs every API call in the browser (sigv4.js); against an
// --anonymous node (an unsigned /v1/whoami succeeds) it asks for nothing.
"use strict";

const POLL_MS = 2000;
const HISTORY = 60; // samples kept per queue for the rate charts (2 minutes at POLL_MS)
const PEEK = 10;
const KEY_STORE = "cmq.console.key"; // sessionStorage item: {id, secret, region}
const history = new Map(); // queue -> [{t, sent, acked}]
let timer = null;
let generation = 0; // bumped by every re-render: a stale poll's answer is dropped
let shown = 0; // bumped by every page shown: a stale page set-up is dropped
// mode: "unknown" (probing), "anonymous", "signin" (asking for a key), "signed"
const auth = { mode: "unknown", key: null, who: null, notice: "" };

// -- helpers -----------------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(code ? `${code}: ${message}` : `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

// One call of the API, signed when signed in. `opts`: method, body (an object, sent as JSON),
// target (an SQS JSON-protocol operation: POST / with X-Amz-Target). Resolves to the parsed
// body; rejects with an ApiError (a 401 in a signed session goes back to the sign-in page).
async function api(path, opts = {}) {
  const method = opts.method || (opts.body !== undefined ? "POST" : "GET");
  const body = opts.body === undefined ? null : JSON.stringify(opts.body);
  const headers = { Accept: "application/json" };
  if (body !== null) headers["Content-Type"] = opts.target ? "application/x-amz-json-1.0" : "application/json";
  if (opts.target) headers["X-Amz-Target"] = `AmazonSQS.${opts.target}`;
  const key = opts.key || (auth.mode === "signed" ? auth.key : null);
  if (key && path !== "/readyz") Object.assign(headers, await cmqSigV4.sign(key, method, path, body));
  const resp = await fetch(path, { method, headers, body, cache: "no-store", credentials: "omit" });
  let payload = null;
  try { payload = await resp.json(); } catch (_) { payload = null; }
  if (!resp.ok && !(path === "/readyz" && resp.status === 503)) {
    const err = payload && payload.error ? payload.error : payload && payload.__type ? { code: payload.__type.split("#").pop(), message: payload.message } : {};
    const e = new ApiError(resp.status, err.code, err.message);
    if (resp.status === 401 && auth.mode === "signed" && !opts.key) signOut(`Signed out: ${e.message}`);
    throw e;
  }
  return payload;
}

// -- access keys and grants --------------------------------------------------------------------
function storedKey() {
  try {
    const k = JSON.parse(sessionStorage.getItem(KEY_STORE) || "null");
    return k && k.id && k.secret ? { id: k.id, secret: k.secret, region: k.region || "us-east-1" } : null;
  } catch (_) { return null; }
}

// The reason sign-in was refused, in words (the node's code is kept at the end).
function refusal(e) {
  const why = {
    SignatureDoesNotMatch: "the secret access key is wrong for this access key id (or the region is not the node's)",
    InvalidClientTokenId: "this access key id is unknown to the cluster (or was deleted)",
    RequestExpired: "this computer's clock is more than 15 minutes away from the node's",
    IncompleteSignature: "the request could not be signed as the node expects",
  }[e.code];
  return `Sign-in refused: ${why || e.message}${why ? ` (${e.code})` : ""}.`;
}

async function signIn(key) {
  if (!window.crypto || !crypto.subtle) {
    throw new Error("Signing needs the Web Crypto API, which browsers offer only on secure pages: open the console over HTTPS (or on localhost).");
  }
  try {
    auth.who = await api("/v1/whoami", { key });
  } catch (e) {
    sessionStorage.removeItem(KEY_STORE);
    throw new Error(e instanceof ApiError && e.status === 401 ? refusal(e) : String(e.message || e));
  }
  auth.key = key;
  auth.mode = auth.who.anonymous ? "anonymous" : "signed";
  if (auth.mode === "signed") sessionStorage.setItem(KEY_STORE, JSON.stringify(key));
}

function signOut(notice) {
  sessionStorage.removeItem(KEY_STORE);
  auth.key = null;
  auth.who = null;
  auth.mode = "signin";
  auth.notice = notice || "";
  location.hash = "#/";
  show();
}

// Python's fnmatch (the grants' glob syntax: *, ?, [...], [!...]) as a whole-string RegExp.
function globRegExp(pattern) {
  let re = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "*") re += ".*";
    else if (c === "?") re += ".";
    else if (c === "[") {
      let j = i + 1;
      if (pattern[j] === "!") j++;
      if (pattern[j] === "]") j++;
      while (j < pattern.length && pattern[j] !== "]") j++;
      if (j >= pattern.length) { re += "\\["; continue; }
      let set = pattern.slice(i + 1, j);
      const negated = set.startsWith("!");
      if (negated) set = set.slice(1);
      set = set.replace(/[\\\]^]/g, "\\$&");
      if (negated) set = "^" + set;
      re += `[${set}]`;
      i = j;
    } else re += c.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`, "s");
}

// Whether the signed-in key may do `action` on `queue` (null: the cluster), as the node decides
// (api/auth/access.py): "admin" implies every action; "any" is any grant on the queue.
function can(action, queue) {
  if (auth.mode === "anonymous") return true;
  if (!auth.who) return false;
  if (queue === null) return auth.who.cluster_admin;
  const actions = action === "any" ? ["send", "receive", "delete", "admin"] : [action];
  return auth.who.grants.some((g) => globRegExp(g.pattern).test(queue) && (g.actions.includes("admin") || actions.some((a) => g.actions.includes(a))));
}

function renderWho() {
  const who = document.getElementById("who");
  const out = document.getElementById("sign-out");
  who.hidden = auth.mode !== "signed" && auth.mode !== "anonymous";
  out.hidden = auth.mode !== "signed";
  if (auth.mode === "anonymous") {
    who.textContent = "anonymous node: no sign-in, everything allowed";
    who.className = "who anonymous";
  } else if (auth.mode === "signed") {
    const grants = auth.who.grants.map((g) => `${g.pattern}: ${g.actions.join(", ")}`).join(" · ") || "no grants";
    who.replaceChildren(el("b", { text: auth.who.access_key_id }), " ", el("span", { class: "grants", text: grants }));
    who.className = "who";
    who.title = auth.who.cluster_admin ? "cluster admin (admin on *)" : "";
  }
}

function fmtNum(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function fmtRate(r) { return r === null ? "–" : r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString("en-US"); }
function fmtAge(ms) {
  if (!ms) return "–";
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}
function fmtTime(ms) { return new Date(ms).toISOString().replace("T", " ").replace("Z", ""); }
// A duration in whole seconds in its largest exact unit: 900 -> "15 min", 345600 -> "4 d".
function fmtSeconds(s) {
  if (s === null || s === undefined) return "–";
  for (const [unit, n] of [["d", 86400], ["h", 3600], ["min", 60]]) {
    if (s >= n && s % n === 0) return `${s / n} ${unit}`;
  }
  return `${s} s`;
}
// A queue's retry back-off policy (null: none), e.g. "5 s ×2, at most 10 min".
function fmtRetry(r) {
  if (!r) return "off";
  return `${fmtSeconds(r.initial_seconds)} ×${r.multiplier}, at most ${fmtSeconds(r.max_seconds)}`;
}
// A queue attribute's value on the queue page: durations with their unit, the retry policy
// in words, other objects as JSON.
function fmtAttribute(k, v) {
  if (k === "retry") return fmtRetry(v);
  if (v === null) return "–";
  if (k === "max_delay_seconds" || k === "message_retention_seconds") return `${v} (${fmtSeconds(v)})`;
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

function record(name, stats) {
  const h = history.get(name) || [];
  h.push({ t: performance.now() / 1000, sent: stats.sent_total, acked: stats.acked_total });
  while (h.length > HISTORY) h.shift();
  history.set(name, h);
}

function rates(name) {
  // Per-interval rates of the samples: [{sent, acked}], oldest first.
  const h = history.get(name) || [];
  const out = [];
  for (let i = 1; i < h.length; i++) {
    const dt = Math.max(h[i].t - h[i - 1].t, 0.001);
    out.push({ sent: Math.max(0, (h[i].sent - h[i - 1].sent) / dt), acked: Math.max(0, (h[i].acked - h[i - 1].acked) / dt) });
  }
  return out;
}

const SVG = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// A small line chart of the series in `lines` ([{values, color, label}]) over HISTORY slots.
function chart(lines, width, height, axis) {
  const svg = svgEl("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  const pad = axis ? 28 : 2;
  const max = Math.max(1, ...lines.flatMap((l) => l.values));
  const x = (i, n) => pad + ((width - pad - 2) * (HISTORY - 1 - (n - 1 - i))) / (HISTORY - 1);
  const y = (v) => height - 3 - ((height - 6) * v) / max;
  svg.append(svgEl("line", { x1: pad, y1: height - 2, x2: width, y2: height - 2, stroke: "#e2e5ec" }));
  if (axis) {
    const label = svgEl("text", { x: 0, y: 11, "font-size": 10, fill: "#6b7385" });
    label.textContent = fmtRate(max);
    svg.append(label);
  }
  for (const l of lines) {
    const n = l.values.length;
    if (n === 0) continue;
    const pts = l.values.map((v, i) => `${x(i, n).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    svg.append(svgEl("polyline", { points: n === 1 ? `${pts} ${pts}` : pts, fill: "none", stroke: l.color, "stroke-width": 1.6 }));
  }
  return svg;
}

function rateLines(name) {
  const r = rates(name);
  return [
    { values: r.map((p) => p.sent), color: "#2f6fde", label: "sent/s" },
    { values: r.map((p) => p.acked), color: "#8a5cd6", label: "acked/s" },
  ];
}

function lastRate(name, key) {
  const r = rates(name);
  return r.length ? r[r.length - 1][key] : null;
}

// -- overview ----------------------------------------------------------------------------------
async function renderOverview(gen) {
  // The key's grants are read again on every poll: a grant or revocation shows within one.
  const [status, list, who] = await Promise.all([api("/v1/status"), api("/v1/queues"), api("/v1/whoami")]);
  if (gen !== generation) return;
  if (auth.mode === "signed") { auth.who = who; renderWho(); }
  const names = list.queues.map((q) => q.name);
  // Queues the key has no grant on are listed (any key may list names) but not read.
  const infos = await Promise.all(names.map((n) => (can("any", n)
    ? api(`/v1/queues/${encodeURIComponent(n)}`).catch((e) => ({ name: n, error: e.message }))
    : { name: n, denied: true })));
  if (gen !== generation) return;
  for (const q of infos) if (q.stats) record(q.name, q.stats);
  document.getElementById("node-label").textContent = `node ${status.node}`;
  renderCluster(status);
  renderNodeState(status);
  renderQueueTable(status, infos);
}

function renderCluster(status) {
  const groups = Object.entries(status.groups);
  const nodes = Object.entries(status.nodes);
  const leaderless = groups.filter(([, g]) => !g.leader).length;
  // Groups whose replica on this node is damaged and being caught up from the others.
  const underRepair = (status.repair && status.repair.under_repair) || {};
  const repairing = Object.keys(underRepair);
  const leads = {};
  for (const [, g] of groups) if (g.leader) leads[g.leader] = (leads[g.leader] || 0) + 1;
  const summary = document.getElementById("summary");
  summary.replaceChildren(
    el("div", {}, el("b", { text: nodes.length }), "nodes"),
    el("div", {}, el("b", { text: groups.length }), "groups"),
    el("div", {}, el("b", { text: status.queues }), "queues"),
    el("div", { class: leaderless ? "error" : "" }, el("b", { text: leaderless }), "groups without a leader"),
    el("div", { class: repairing.length ? "error" : "", id: "repairing" }, el("b", { text: repairing.length }), "under repair here"),
  );
  // Each node's release as it last told the node serving this page (absent: no answer yet).
  const releaseOf = ([, info]) => info.release || "unknown";
  const known = new Set(nodes.map(releaseOf).filter((r) => r !== "unknown"));
  const mixed = known.size > 1;
  const releases = document.getElementById("releases");
  releases.className = mixed ? "releases mixed" : "releases muted small";
  releases.textContent = (mixed ? "mixed releases: " : "releases: ") + releasesLine(nodes.map(([id, info]) => [id, releaseOf([id, info])]));
  const box = document.getElementById("nodes");
  box.replaceChildren(...nodes.map(([id, info]) => {
    const led = groups.filter(([, g]) => String(g.leader) === id).map(([gid]) => gid);
    const member = groups.filter(([, g]) => g.voters.map(String).includes(id)).length;
    const release = releaseOf([id, info]);
    const protocol = info.protocol ? `peer protocol ${info.protocol.min}-${info.protocol.max}` : "";
    return el("div", { class: "node" + (String(status.node) === id ? " self" : ""), "data-node": id },
      el("div", { class: "title" }, el("span", { text: `node ${id}` }), el("span", { class: "muted small", text: String(status.node) === id ? "this node" : "" })),
      el("div", {}, el("span", { class: "badge release" + (mixed ? " mixed" : ""), "data-release": release, title: protocol || null, text: `release ${release}` })),
      el("div", { class: "addr", text: info.address }),
      info.zone ? el("div", { class: "muted small", text: `zone ${info.zone}` }) : null,
      el("div", { class: "dirs", text: (info.data_dirs || []).join(", ") }),
      el("div", { class: "muted small", text: `replica of ${member} groups, leads ${led.length}` }),
      el("div", {}, ...led.map((g) => el("span", { class: "badge leader", text: `leads ${g === "0" ? "meta" : "g" + g}` }))),
    );
  }));
  const queuesOf = {};
  for (const [q, g] of Object.entries(status.placement)) (queuesOf[g] = queuesOf[g] || []).push(q);
  const tbody = document.querySelector("#groups tbody");
  tbody.replaceChildren(...groups.map(([gid, g]) => {
    const lag = Object.entries(g.lag || {});
    const lagText = g.role === "leader" ? (lag.length ? lag.map(([p, n]) => `node ${p}: ${n}`).join(", ") : "–") : `(known on node ${g.leader || "?"})`;
    return el("tr", { "data-group": gid },
      el("td", {}, gid === "0" ? "0 (meta)" : gid,
        underRepair[gid] ? el("span", { class: "pill bad", title: underRepair[gid], text: "repairing here" }) : null),
      el("td", { text: gid === "0" ? "catalog" : (queuesOf[gid] || []).length }),
      el("td", {}, g.leader ? el("span", { class: "badge leader", text: `node ${g.leader}` }) : el("span", { class: "pill bad", text: "none" })),
      el("td", { text: g.voters.join(", ") }),
      el("td", { class: "num", text: g.term }),
      el("td", { class: "num", text: fmtNum(g.commit) }),
      el("td", { class: "num", text: fmtNum(g.applied) }),
      el("td", { class: "lag", text: lagText }),
    );
  }));
}

function present(...nodes) { return nodes.filter((n) => n !== null && n !== undefined); }

function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// This node's clock against its peers', repairs of its damaged replicas, and its disks: the
// `clock`, `repair`, `scrub` and `disks` fields of /v1/status (absent on an older node).
function renderNodeState(status) {
  const clock = status.clock;
  const clockBox = document.getElementById("clock-state");
  if (!clock) clockBox.replaceChildren(el("span", { class: "muted", text: "clock: not reported" }));
  else {
    const state = clock.unsafe ? "unsafe" : clock.stepped ? "stepped" : !clock.verified ? "unverified" : "ok";
    const pill = { ok: "ok", unverified: "warn" }[state] || "bad";
    clockBox.replaceChildren(...present(
      el("b", { text: "clock " }),
      el("span", { class: `pill ${pill}`, "data-state": state, text: state }),
      ` offset ${clock.offset_ms.toFixed(1)} ms of ±${clock.bound_ms} ms allowed, ${clock.peers_read} peer readings`,
      clock.off_peers.length ? el("span", { class: "error", text: ` · beyond the bound: node ${clock.off_peers.join(", ")}` }) : null,
      clock.unsafe ? el("span", { class: "error", text: " · this node does not lead while unsafe" }) : null,
    ));
  }
  const repair = status.repair;
  const repairBox = document.getElementById("repair-state");
  if (!repair) repairBox.replaceChildren(el("span", { class: "muted", text: "repair: not reported" }));
  else {
    const groups = Object.entries(repair.under_repair);
    const state = groups.length ? "repairing" : repair.enabled ? "ok" : "off";
    repairBox.replaceChildren(...present(
      el("b", { text: "repair " }),
      el("span", { class: `pill ${{ ok: "ok", off: "warn" }[state] || "bad"}`, "data-state": state, text: state }),
      ` self-repair ${repair.enabled ? "on" : "off (damage stops the node)"}, ${repair.started} started, ${repair.completed} completed`,
      ...groups.map(([g, why]) => el("div", { class: "error small", "data-group": g, text: `group ${g}: ${why}` })),
      status.scrub ? el("div", { class: "muted small", text: `scrub: ${status.scrub.passes} passes, ${fmtBytes(status.scrub.bytes)} re-read, ${status.scrub.findings} findings` }) : null,
    ));
  }
  document.querySelector("#disks tbody").replaceChildren(...(status.disks || []).map((d) => el("tr", { "data-dir": d.directory },
    el("td", { class: "dir", text: d.directory }),
    el("td", {}, el("span", { class: `pill ${d.state === "ok" ? "ok" : "bad"}`, text: d.state })),
    el("td", { class: "num", text: fmtBytes(d.free_bytes) }),
    el("td", { class: "num", text: d.fsync_seconds.toFixed(3) }),
    el("td", { class: "error", text: d.failed || (d.full ? "below the free-space reserve: sends refused" : d.slow ? "slow fsyncs: leadership handed off" : "") }),
  )));
}

// "0.1.0 (node 3), 0.2.0 (nodes 1, 2)": the nodes of each release, oldest release first.
function releasesLine(pairs) {
  const by = new Map();
  for (const [id, r] of pairs) by.set(r, [...(by.get(r) || []), id]);
  const key = (r) => r === "unknown" ? [Infinity] : r.split(".").map(Number);
  const order = (a, b) => {
    const [x, y] = [key(a), key(b)];
    for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] || 0) !== (y[i] || 0)) return (x[i] || 0) - (y[i] || 0);
    return 0;
  };
  return [...by.keys()].sort(order).map((r) => `${r} (node${by.get(r).length > 1 ? "s" : ""} ${by.get(r).join(", ")})`).join(", ");
}

function renderQueueTable(status, infos) {
  const tbody = document.querySelector("#queues tbody");
  document.getElementById("no-queues").hidden = infos.length > 0;
  tbody.replaceChildren(...infos.map((q) => {
    if (q.denied) {
      return el("tr", { "data-queue": q.name, class: "denied" }, el("td", { class: "muted", text: q.name }),
        el("td", { text: status.placement[q.name] ?? "" }),
        el("td", { class: "muted", colspan: 10, text: "no grant on this queue for this key" }));
    }
    const link = el("a", { class: "q", href: `#/queue/${encodeURIComponent(q.name)}`, text: q.name });
    if (!q.stats) return el("tr", { "data-queue": q.name }, el("td", {}, link), el("td", { class: "error", colspan: 11, text: q.error }));
    const s = q.stats;
    return el("tr", { "data-queue": q.name },
      el("td", {}, link),
      el("td", { text: status.placement[q.name] ?? "" }),
      el("td", { class: "num depth", text: fmtNum(s.visible) }),
      el("td", { class: "num inflight", text: fmtNum(s.in_flight) }),
      el("td", { class: "num delayed", text: fmtNum(s.delayed) }),
      el("td", { class: "num sent-rate", text: fmtRate(lastRate(q.name, "sent")) }),
      el("td", { class: "num acked-rate", text: fmtRate(lastRate(q.name, "acked")) }),
      el("td", { class: "num oldest", text: fmtAge(s.oldest_age_ms) }),
      el("td", { class: "num max-delay", text: fmtSeconds(q.attributes.max_delay_seconds) }),
      el("td", { class: "num retention", text: fmtSeconds(q.attributes.message_retention_seconds) }),
      el("td", { class: "retry", text: fmtRetry(q.attributes.retry) }),
      el("td", { class: "spark" }, chart(rateLines(q.name), 220, 28, false)),
    );
  }));
}

// -- queue page --------------------------------------------------------------------------------
async function renderQueue(name, gen) {
  const path = `/v1/queues/${encodeURIComponent(name)}`;
  const mayPeek = can("receive", name);
  const [q, peek] = await Promise.all([api(path), mayPeek ? api(`${path}/messages?peek=${PEEK}`) : null]);
  if (gen !== generation) return;
  record(name, q.stats);
  document.getElementById("q-name").textContent = name;
  const kv = (obj, fmt) => Object.entries(obj).map(([k, v]) => el("tr", { "data-key": k }, el("td", { text: k }), el("td", { text: fmt(k, v) })));
  const stat = (k, v) => (k === "oldest_age_ms" ? fmtAge(v)
    : v !== null && typeof v === "object" ? Object.entries(v).map(([n, c]) => `${n} ${fmtNum(c)}`).join(", ")
    : fmtNum(v));
  document.querySelector("#q-stats tbody").replaceChildren(...kv(q.stats, stat));
  document.querySelector("#q-attributes tbody").replaceChildren(...kv(q.attributes, fmtAttribute));
  renderLevels(q);
  syncForms(q);
  const lines = rateLines(name);
  document.getElementById("q-chart").replaceChildren(
    chart(lines, 560, 120, true),
    el("div", { class: "legend" }, ...lines.flatMap((l) => [el("i", { style: `background:${l.color}` }), `${l.label} ${fmtRate(l.values.length ? l.values[l.values.length - 1] : null)}`])),
  );
  document.getElementById("q-peek-denied").hidden = mayPeek;
  document.getElementById("q-peek").hidden = !mayPeek;
  const messages = peek ? peek.messages : [];
  document.getElementById("q-empty").hidden = !mayPeek || messages.length > 0;
  document.querySelector("#q-peek tbody").replaceChildren(...messages.map((m) => el("tr", { "data-seq": m.seq },
    el("td", { class: "num", text: m.seq }),
    el("td", { text: m.id }),
    el("td", { text: fmtTime(m.sent_at) }),
    el("td", { class: "body", text: m.body !== undefined ? m.body : `(base64) ${m.body_base64}` }),
    el("td", { text: Object.entries(m.attributes || {}).map(([k, v]) => `${k}=${v}`).join(", ") }),
  )));
  if (redriveSources(name).length) await renderMove(name, gen);
}

// -- priorities, tenants, sending and attributes ----------------------------------------------
// The queue's priority levels (the attribute priorities), the visible messages at each (stats
// visible_by_priority), highest level first, and on a standard queue its tenants with a message
// ready to be received (stats tenants: a message's group id names its tenant).
function renderLevels(q) {
  const levels = q.attributes.priorities || 1;
  document.getElementById("q-levels-summary").textContent = levels > 1
    ? `${levels} priority levels: 0 (lowest) to ${levels - 1} (highest); a receive takes the highest level first`
    : "1 priority level: no priorities (every message is at level 0)";
  const byLevel = q.stats.visible_by_priority || [];
  const table = document.getElementById("q-levels");
  table.hidden = levels < 2;
  const rows = [];
  for (let l = levels - 1; l >= 0; l--) {
    rows.push(el("tr", { "data-level": l }, el("td", { text: String(l) }), el("td", { class: "num", text: fmtNum(byLevel[l] ?? 0) })));
  }
  table.querySelector("tbody").replaceChildren(...rows);
  const tenants = document.getElementById("q-tenants");
  const n = q.stats.tenants || 0;
  tenants.hidden = Boolean(q.attributes.fifo);
  tenants.dataset.tenants = String(n);
  tenants.textContent = n
    ? `fair queue: ${fmtNum(n)} tenant${n === 1 ? "" : "s"} with messages ready, served in turn`
    : "no tenant with messages ready (a message's group id names its tenant)";
}

// The forms follow the queue's attributes: a priority choice on a queue with levels, the group
// id required on a FIFO queue (and a deduplication id unless it deduplicates by content), the
// levels field showing the attribute until the user edits it.
function syncForms(q) {
  const levels = q.attributes.priorities || 1;
  const select = document.getElementById("send-priority");
  if (select.options.length !== levels) {
    const keep = Math.min(Number(select.value || 0), levels - 1);
    const label = (l) => (l === 0 ? "0 (lowest)" : l === levels - 1 ? `${l} (highest)` : String(l));
    select.replaceChildren(...Array.from({ length: levels }, (_, l) => el("option", { value: l, text: label(l) })));
    select.value = String(keep);
  }
  document.getElementById("send-priority-label").hidden = levels < 2;
  const fifo = Boolean(q.attributes.fifo);
  document.getElementById("send-group-name").textContent = fifo ? "message group id (required)" : "tenant (group id, optional)";
  document.getElementById("send-group").required = fifo;
  document.getElementById("send-dedup-label").hidden = !fifo || Boolean(q.attributes.content_based_deduplication);
  const input = document.getElementById("attr-priorities");
  if (!input.dataset.edited) input.value = String(levels);
}

function formResult(id, text, isError) {
  const out = document.getElementById(id);
  out.textContent = text;
  out.className = isError ? "error" : "muted";
}

// Send one message (the send grant: POST /v1/queues/{name}/messages) at the chosen priority,
// with the group id given (a standard queue's tenant, a FIFO queue's group).
async function sendFromForm(name) {
  const m = { body: document.getElementById("send-body").value };
  const priority = Number(document.getElementById("send-priority").value || 0);
  if (priority) m.priority = priority;
  const group = document.getElementById("send-group").value.trim();
  if (group) m.group_id = group;
  const dedup = document.getElementById("send-dedup").value.trim();
  if (dedup && !document.getElementById("send-dedup-label").hidden) m.dedup_id = dedup;
  const button = document.getElementById("send");
  button.disabled = true;
  try {
    const r = await api(`/v1/queues/${encodeURIComponent(name)}/messages`, { body: { messages: [m] } });
    const sent = r.messages[0];
    formResult("send-result", `sent ${sent.id} (seq ${sent.seq}) at priority ${priority}${group ? `, group id ${group}` : ""}`);
    document.getElementById("send-body").value = "";
  } catch (e) {
    formResult("send-result", `send failed: ${e.message}`, true);
  }
  button.disabled = false;
  refreshNow();
}

// Set the queue's priority levels (the admin grant: PATCH /v1/queues/{name}); messages already
// stored keep their level.
async function saveAttributes(name) {
  const input = document.getElementById("attr-priorities");
  const levels = Number(input.value);
  if (!Number.isInteger(levels) || levels < 1 || levels > 32) {
    formResult("attr-result", "priority levels: a whole number from 1 to 32", true);
    return;
  }
  try {
    const r = await api(`/v1/queues/${encodeURIComponent(name)}`, { method: "PATCH", body: { attributes: { priorities: levels } } });
    delete input.dataset.edited;
    formResult("attr-result", `saved: priorities ${r.attributes.priorities}`);
  } catch (e) {
    formResult("attr-result", `not saved: ${e.message}`, true);
  }
  refreshNow();
}

function setUpForms(name) {
  const sendForm = document.getElementById("send-form");
  const attrForm = document.getElementById("attr-form");
  sendForm.hidden = !can("send", name);
  attrForm.hidden = !can("admin", name);
  document.getElementById("q-forms-denied").hidden = !sendForm.hidden && !attrForm.hidden;
  sendForm.addEventListener("submit", (ev) => { ev.preventDefault(); sendFromForm(name); });
  attrForm.addEventListener("submit", (ev) => { ev.preventDefault(); saveAttributes(name); });
  const input = document.getElementById("attr-priorities");
  input.addEventListener("input", () => { input.dataset.edited = "1"; });
}

// Ask before doing something that cannot be undone: resolves to true when confirmed.
function confirmAction(text, okLabel) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

function actionResult(text, isError) {
  const out = document.getElementById("q-action-result");
  out.textContent = text;
  out.className = isError ? "error" : "muted";
}

// Purge (admin on the queue: POST /v1/queues/{name}/purge), after a confirmation.
async function purge(name) {
  if (!(await confirmAction(`Delete every message of ${name}? This cannot be undone.`, "Purge"))) return;
  try {
    const r = await api(`/v1/queues/${encodeURIComponent(name)}/purge`, { method: "POST", body: {} });
    actionResult(`purged ${fmtNum(r.purged)} messages`);
  } catch (e) {
    actionResult(`purge failed: ${e.message}`, true);
  }
  refreshNow();
}

// Rewind (admin on the queue: POST /v1/queues/{name}/rewind): the acknowledged messages sent
// since the chosen time (this browser's time zone) that the queue keeps are delivered again.
async function rewind(name) {
  const value = document.getElementById("rewind-since").value;
  const since = value ? new Date(value) : null;
  if (!since || Number.isNaN(since.getTime())) { actionResult("rewind: choose a time first", true); return; }
  const text = `Deliver again every acknowledged message of ${name} sent since ${since.toLocaleString()} that it still keeps?`;
  if (!(await confirmAction(text, "Rewind"))) return;
  try {
    const body = { since: since.toISOString() };
    const r = await api(`/v1/queues/${encodeURIComponent(name)}/rewind`, { method: "POST", body });
    actionResult(`rewound: ${fmtNum(r.rewound)} messages delivered again`);
  } catch (e) {
    actionResult(`rewind failed: ${e.message}`, true);
  }
  refreshNow();
}

// The queues whose dead-letter queue is `name` (learnt when the page opened).
const dlqSources = new Map(); // queue -> [source queue]
function redriveSources(name) { return dlqSources.get(name) || []; }

// One SQS call (ListDeadLetterSourceQueues: the node reads every queue's attributes).
async function findSources(name) {
  const { QueueUrl } = await api("/", { target: "GetQueueUrl", body: { QueueName: name } });
  const r = await api("/", { target: "ListDeadLetterSourceQueues", body: { QueueUrl } });
  dlqSources.set(name, (r.queueUrls || []).map((u) => decodeURIComponent(u.split("/").pop())));
}

async function arnOf(name) {
  const { QueueUrl } = await api("/", { target: "GetQueueUrl", body: { QueueName: name } });
  const r = await api("/", { target: "GetQueueAttributes", body: { QueueUrl, AttributeNames: ["QueueArn"] } });
  return r.Attributes.QueueArn;
}

// Redrive: move a dead-letter queue's messages back to a queue that dead-letters into it (the
// SQS message move task; its mover runs on the node, so closing the page does not stop it).
async function redrive(name) {
  const sources = redriveSources(name);
  const to = sources.length === 1 ? sources[0] : document.getElementById("redrive-to").value;
  if (!(await confirmAction(`Move every message of ${name} back to ${to}?`, "Redrive"))) return;
  try {
    const source = await arnOf(name);
    const body = { SourceArn: source };
    if (sources.length > 1) body.DestinationArn = source.replace(/:[^:]*$/, `:${to}`);
    await api("/", { target: "StartMessageMoveTask", body });
    actionResult(`redrive to ${to} started`);
  } catch (e) {
    actionResult(`redrive failed: ${e.message}`, true);
  }
  refreshNow();
}

async function renderMove(name, gen) {
  let text = "";
  try {
    const r = await api("/", { target: "ListMessageMoveTasks", body: { SourceArn: await arnOf(name) } });
    const t = r.Results[0];
    if (t) text = `last redrive: ${t.Status}, ${fmtNum(t.ApproximateNumberOfMessagesMoved)} of ${fmtNum(t.ApproximateNumberOfMessagesToMove)} moved to ${t.DestinationArn.split(":").pop()}${t.FailureReason ? ` (${t.FailureReason})` : ""}`;
  } catch (e) {
    text = `redrive status unavailable: ${e.message}`;
  }
  if (gen === generation) document.getElementById("q-move").textContent = text;
}

// The buttons this key may use on queue `name`: purge and rewind (admin on it), redrive (admin
// on the cluster, as the message move tasks need, and only on a dead-letter queue).
async function setUpActions(name, page) {
  setUpForms(name);
  if (can("admin", name)) {
    const b = document.getElementById("purge");
    b.hidden = false;
    b.addEventListener("click", () => purge(name));
    document.getElementById("rewind-box").hidden = false;
    document.getElementById("rewind").addEventListener("click", () => rewind(name));
  } else {
    document.getElementById("purge").remove();
    document.getElementById("rewind-box").remove();
  }
  if (!can("admin", name)) {
    document.getElementById("q-action-result").textContent = "purge, rewind and redrive need the admin grant: this key may only look";
  }
  if (!can("admin", null)) { document.getElementById("redrive-box").remove(); return; }
  try { await findSources(name); } catch (_) { dlqSources.set(name, []); }
  if (page !== shown) return;
  const sources = redriveSources(name);
  if (!sources.length) { document.getElementById("redrive-box").remove(); return; }
  document.getElementById("redrive-box").hidden = false;
  const select = document.getElementById("redrive-to");
  select.hidden = sources.length < 2;
  select.replaceChildren(...sources.map((n) => el("option", { value: n, text: n })));
  document.getElementById("redrive").addEventListener("click", () => redrive(name));
}

// -- routing and polling -----------------------------------------------------------------------
function route() {
  const m = location.hash.match(/^#\/queue\/(.+)$/);
  return m ? { page: "queue", name: decodeURIComponent(m[1]) } : { page: "overview" };
}

async function refresh() {
  const gen = generation;
  const r = route();
  try {
    const ready = await api("/readyz");
    const pill = document.getElementById("health");
    pill.textContent = ready.ready ? "ready" : "not ready";
    pill.className = "pill " + (ready.ready ? "ok" : "bad");
    if (r.page === "queue") await renderQueue(r.name, gen);
    else await renderOverview(gen);
    if (gen === generation) document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (gen !== generation) return;
    const pill = document.getElementById("health");
    pill.textContent = "error";
    pill.className = "pill bad";
    document.getElementById("updated").textContent = String(e.message || e);
  }
  if (gen === generation) timer = setTimeout(refresh, POLL_MS);
}

function refreshNow() {
  generation += 1;
  clearTimeout(timer);
  refresh();
}

function showSignIn() {
  document.getElementById("view").replaceChildren(document.getElementById("tpl-signin").content.cloneNode(true));
  const error = document.getElementById("signin-error");
  error.hidden = !auth.notice;
  error.textContent = auth.notice;
  const form = document.getElementById("signin");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    // The inputs have no name: nothing of them is ever part of a form submission.
    const secret = document.getElementById("secret");
    const key = { id: document.getElementById("key-id").value.trim(), secret: secret.value, region: document.getElementById("region").value.trim() };
    secret.value = "";
    document.getElementById("signin-submit").disabled = true;
    try {
      await signIn(key);
      auth.notice = "";
      show();
    } catch (e) {
      error.textContent = String(e.message || e);
      error.hidden = false;
      document.getElementById("signin-submit").disabled = false;
      secret.focus();
    }
  });
  document.getElementById("key-id").focus();
}

function show() {
  generation += 1;
  clearTimeout(timer);
  renderWho();
  if (auth.mode === "signin") {
    document.getElementById("health").textContent = "sign in";
    document.getElementById("health").className = "pill";
    showSignIn();
    return;
  }
  const r = route();
  const tpl = document.getElementById(r.page === "queue" ? "tpl-queue" : "tpl-overview");
  document.getElementById("view").replaceChildren(tpl.content.cloneNode(true));
  shown += 1;
  if (r.page === "queue") setUpActions(r.name, shown);
  refresh();
}

// Anonymous node (an unsigned /v1/whoami is answered), a key of this tab, or the sign-in page.
async function start() {
  try {
    auth.who = await api("/v1/whoami");
    auth.mode = "anonymous";
  } catch (e) {
    const key = storedKey();
    auth.mode = "signin";
    if (!(e instanceof ApiError && e.status === 401)) auth.notice = `The node did not answer: ${e.message}`;
    else if (key) {
      try { await signIn(key); } catch (err) { auth.notice = String(err.message || err); }
    }
  }
  document.getElementById("sign-out").addEventListener("click", () => signOut("Signed out."));
  window.addEventListener("hashchange", show);
  show();
}

start();
