// cmq web console: reads the public JSON API of the node serving it (/v1/status, /v1/queues,
// /v1/queues/{name}, /v1/queues/{name}/messages?peek=N, /readyz) every POLL_MS and renders a
// cluster map, a queue table with rate charts, and a queue page. No framework, no build step.
"use strict";

const POLL_MS = 2000;
const HISTORY = 60; // samples kept per queue for the rate charts (2 minutes at POLL_MS)
const PEEK = 10;
const history = new Map(); // queue -> [{t, sent, acked}]
let timer = null;
let generation = 0;

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

async function api(path) {
  const resp = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  let body = null;
  try { body = await resp.json(); } catch (_) { body = null; }
  if (!resp.ok && !(path === "/readyz" && resp.status === 503)) {
    const err = body && body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${resp.status}`;
    throw new Error(err);
  }
  return body;
}

function fmtNum(n) { return Number(n).toLocaleString("en-US"); }
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
  const [status, list] = await Promise.all([api("/v1/status"), api("/v1/queues")]);
  const names = list.queues.map((q) => q.name);
  const infos = await Promise.all(names.map((n) => api(`/v1/queues/${encodeURIComponent(n)}`).catch((e) => ({ name: n, error: e.message }))));
  if (gen !== generation) return;
  for (const q of infos) if (q.stats) record(q.name, q.stats);
  document.getElementById("node-label").textContent = `node ${status.node}`;
  renderCluster(status);
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
    const link = el("a", { class: "q", href: `#/queue/${encodeURIComponent(q.name)}`, text: q.name });
    if (!q.stats) return el("tr", { "data-queue": q.name }, el("td", {}, link), el("td", { class: "error", colspan: 8, text: q.error }));
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
      el("td", { class: "spark" }, chart(rateLines(q.name), 220, 28, false)),
    );
  }));
}

// -- queue page --------------------------------------------------------------------------------
async function renderQueue(name, gen) {
  const path = `/v1/queues/${encodeURIComponent(name)}`;
  const [q, peek] = await Promise.all([api(path), api(`${path}/messages?peek=${PEEK}`)]);
  if (gen !== generation) return;
  record(name, q.stats);
  document.getElementById("q-name").textContent = name;
  const kv = (obj, fmt) => Object.entries(obj).map(([k, v]) => el("tr", { "data-key": k }, el("td", { text: k }), el("td", { text: fmt(k, v) })));
  document.querySelector("#q-stats tbody").replaceChildren(...kv(q.stats, (k, v) => (k === "oldest_age_ms" ? fmtAge(v) : fmtNum(v))));
  document.querySelector("#q-attributes tbody").replaceChildren(...kv(q.attributes, (k, v) => (v === null ? "–" : String(v))));
  const lines = rateLines(name);
  document.getElementById("q-chart").replaceChildren(
    chart(lines, 560, 120, true),
    el("div", { class: "legend" }, ...lines.flatMap((l) => [el("i", { style: `background:${l.color}` }), `${l.label} ${fmtRate(l.values.length ? l.values[l.values.length - 1] : null)}`])),
  );
  document.getElementById("q-empty").hidden = peek.messages.length > 0;
  document.querySelector("#q-peek tbody").replaceChildren(...peek.messages.map((m) => el("tr", { "data-seq": m.seq },
    el("td", { class: "num", text: m.seq }),
    el("td", { text: m.id }),
    el("td", { text: fmtTime(m.sent_at) }),
    el("td", { class: "body", text: m.body !== undefined ? m.body : `(base64) ${m.body_base64}` }),
    el("td", { text: Object.entries(m.attributes || {}).map(([k, v]) => `${k}=${v}`).join(", ") }),
  )));
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
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    const pill = document.getElementById("health");
    pill.textContent = "error";
    pill.className = "pill bad";
    document.getElementById("updated").textContent = String(e.message || e);
  }
  if (gen === generation) timer = setTimeout(refresh, POLL_MS);
}

function show() {
  generation += 1;
  clearTimeout(timer);
  const r = route();
  const tpl = document.getElementById(r.page === "queue" ? "tpl-queue" : "tpl-overview");
  document.getElementById("view").replaceChildren(tpl.content.cloneNode(true));
  refresh();
}

window.addEventListener("hashchange", show);
show();
