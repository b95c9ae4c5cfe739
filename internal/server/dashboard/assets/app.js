// flowlb dashboard: polls /dashboard/api/state (docs/operations.md,
// Dashboard) and renders it. Under Keystone the token lives in this
// tab's sessionStorage and goes out as X-Auth-Token, as any API client
// sends it. Everything from the server is set as text, never as HTML.
"use strict";

const api = "api/";
let pollSeconds = 2;
let timer = null;

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function badge(status) { return el("span", { class: "badge " + status }, status); }

function token() { return sessionStorage.getItem("flowlb-token"); }

function showLogin(msg) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("logout").hidden = true;
  $("login-error").textContent = msg || "";
  $("summary").textContent = "sign in to see the load balancers";
}

async function fetchState() {
  const headers = { "Accept": "application/json" };
  if (token()) headers["X-Auth-Token"] = token();
  const r = await fetch(api + "state", { headers, cache: "no-store" });
  if (r.status === 401) { sessionStorage.removeItem("flowlb-token"); return { login: true }; }
  if (!r.ok) throw new Error("HTTP " + r.status);
  return { state: await r.json() };
}

async function poll() {
  clearTimeout(timer);
  try {
    const got = await fetchState();
    if (got.login) { showLogin(token() ? "the token was refused" : ""); return; }
    $("login").hidden = true;
    $("main").hidden = false;
    $("logout").hidden = !token();
    render(got.state);
  } catch (e) {
    $("updated").textContent = "update failed: " + e.message;
  }
  timer = setTimeout(poll, pollSeconds * 1000);
}

function fmtTime(t) { return new Date(t).toLocaleTimeString("en-GB"); }
function ms(a, b) { return Math.max(0, new Date(b) - new Date(a)); }
function fmtMs(v) { return v >= 10000 ? (v / 1000).toFixed(1) + " s" : Math.round(v) + " ms"; }
function fmtNum(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return (Math.round(v * 10) / 10).toString();
}

// series turns samples into points: a gauge as is, a counter as its rate
// per second between samples.
function series(history, field, rate) {
  const out = [];
  for (let i = rate ? 1 : 0; i < history.length; i++) {
    const s = history[i];
    if (!rate) { out.push(s[field]); continue; }
    const p = history[i - 1];
    const dt = (new Date(s.at) - new Date(p.at)) / 1000;
    out.push(dt > 0 ? Math.max(0, s[field] - p[field]) / dt : 0);
  }
  return out;
}

function sparkline(label, values) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 140 28");
  svg.setAttribute("preserveAspectRatio", "none");
  const top = Math.max(1, ...values);
  const n = Math.max(values.length - 1, 1);
  const pts = values.map((v, i) => (i * 140 / n).toFixed(1) + "," + (27 - v / top * 25).toFixed(1));
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts.join(" "));
  svg.append(line);
  const last = values.length ? values[values.length - 1] : 0;
  return el("div", { class: "spark" }, el("span", null, label, " ", el("b", null, fmtNum(last))), svg);
}

function sparks(history) {
  if (!history || history.length === 0) return el("div", { class: "sparks muted" }, "statistics: first sample pending");
  return el("div", { class: "sparks" },
    sparkline("connections/s", series(history, "total_connections", true)),
    sparkline("active connections", series(history, "active_connections", false)),
    sparkline("bytes in/s", series(history, "bytes_in", true)),
    sparkline("bytes out/s", series(history, "bytes_out", true)),
    sparkline("errors/s", series(history, "request_errors", true)));
}

function statuses(o) { return [" ", badge(o.provisioning_status), " ", badge(o.operating_status)]; }

function memberItem(m) {
  return el("li", { "data-member": m.id, "data-status": m.operating_status },
    el("span", { class: "kind" }, "member"), m.name || "", " ", m.address + ":" + m.protocol_port,
    m.backup ? " (backup)" : "", " weight " + m.weight, " ", badge(m.operating_status),
    m.prober ? el("span", { class: "muted" }, " probed from " + m.prober) : null,
    m.stats ? el("span", { class: "muted", "data-member-connections": m.stats.total_connections }, " · " + fmtNum(m.stats.total_connections) + " connections, " +
      fmtNum(m.stats.bytes_in) + "B in, " + fmtNum(m.stats.bytes_out) + "B out") : null);
}

function poolItem(p) {
  const hm = p.healthmonitor;
  return el("li", { "data-pool": p.id },
    el("span", { class: "kind" }, "pool"), p.name || p.id, " " + p.protocol + " " + p.lb_algorithm, ...statuses(p),
    hm ? el("span", { class: "muted" }, " · monitor " + hm.type + " every " + hm.delay + " s") : el("span", { class: "muted" }, " · no monitor"),
    el("ul", null, ...p.members.map(memberItem)));
}

function listenerItem(l) {
  return el("li", { "data-listener": l.id },
    el("span", { class: "kind" }, "listener"), (l.name || l.id) + " " + l.protocol + ":" + l.protocol_port, ...statuses(l),
    sparks(l.history), el("ul", null, ...l.pools.map(poolItem)));
}

function lbCard(lb) {
  return el("div", { class: "lb", "data-lb": lb.id, "data-status": lb.operating_status },
    el("div", { class: "lb-head" }, el("span", { class: "name" }, lb.name || lb.id), el("span", null, "VIP " + lb.vip_address),
      ...statuses(lb), el("span", { class: "muted" }, "project " + lb.project_id)),
    sparks(lb.history),
    el("ul", { class: "tree" }, ...lb.listeners.map(listenerItem), ...lb.pools.map(poolItem)));
}

// kernelCell says how a node's kernel stands against its agent's flows:
// refusing the agent's writes (and since when, why), or in step, and the
// repairs of other processes' changes; unknown for a node of another
// replica.
function kernelCell(k) {
  if (!k) return el("td", { class: "muted", "data-kernel": "unknown" }, "another replica's");
  const state = k.refusal
    ? el("span", { class: "refusing" }, `refuses writes since ${fmtTime(k.refusing_since)} (${k.refused_attempts} attempts): ${k.refusal}`)
    : el("span", { class: "lag0" }, "takes writes");
  const repairs = k.repairs
    ? el("span", { class: "muted" }, ` · ${k.repairs} repaired, last at ${fmtTime(k.last_repair)}: ${k.last_repair_what}`)
    : null;
  return el("td", { "data-kernel": k.refusal ? "refusing" : "ok", "data-repairs": k.repairs }, state, repairs);
}

// announceCell says what a node announces of the external VIPs: how
// many, and over how many established BGP sessions of how many (each
// named with its BFD state on hover); nothing for a node that announces
// nothing or is another replica's.
function announceCell(an) {
  if (!an) return el("td", { class: "muted", "data-announce": "none" }, "—");
  const vips = `${an.vips} VIP${an.vips === 1 ? "" : "s"}`;
  if (an.mode !== "bgp") return el("td", { "data-announce": an.mode, "data-vips": an.vips }, `routing table: ${vips}`);
  const up = an.sessions.filter(x => x.state === "established").length;
  const title = an.sessions.map(x => `${x.peer} AS ${x.asn} ${x.state}` + (x.since ? ` since ${fmtTime(x.since)}` : "") + (x.bfd ? `, BFD ${x.bfd}` : "")).join("\n");
  return el("td", { "data-announce": "bgp", "data-vips": an.vips, "data-sessions-up": up, title },
    el("span", { class: up ? "lag0" : "refusing" }, `BGP ${up}/${an.sessions.length} established`), `: ${vips}`);
}

// l2Cell lists the external VIPs the servers give a node to answer ARP
// and neighbour discovery for (the first few, all on hover); a dash
// without L2 ranges.
function l2Cell(vips) {
  if (!vips) return el("td", { class: "muted", "data-l2": "none" }, "—");
  const shown = vips.slice(0, 4).join(", ") + (vips.length > 4 ? ` +${vips.length - 4}` : "");
  return el("td", { "data-l2": vips.join(" "), "data-l2-vips": vips.length, title: vips.join("\n") },
    `${vips.length} VIP${vips.length === 1 ? "" : "s"}` + (vips.length ? ": " + shown : ""));
}

function render(s) {
  pollSeconds = pollSeconds || 2;
  const agents = s.agents;
  $("summary").textContent = `replica ${s.replica} · revision ${s.revision} · ${s.loadbalancers.length} load balancers` +
    (agents ? ` · ${agents.length} agents` : "");
  $("updated").textContent = "updated " + fmtTime(s.generated_at);

  const lbs = $("lbs");
  lbs.replaceChildren(...(s.loadbalancers.length ? s.loadbalancers.map(lbCard) : [el("p", { class: "muted" }, "no load balancers")]));

  $("agents-section").hidden = !agents;
  if (agents) {
    $("agents").tBodies[0].replaceChildren(...agents.map(a => el("tr", { "data-agent": a.node, "data-revision": a.revision, "data-lag": a.lag },
      el("td", null, a.node), el("td", { class: "num" }, a.revision),
      el("td", { class: "num " + (a.lag ? "lagging" : "lag0") }, a.lag),
      kernelCell(a.kernel),
      announceCell(a.announce),
      l2Cell(a.l2),
      el("td", null, a.probes.length + (a.probes.length ? ": " + a.probes.map(p => p.label || p.member_id).join(", ") : "")))));
  }

  $("transitions").tBodies[0].replaceChildren(...s.health_transitions.map(t => el("tr", { "data-transition": t.member_id, "data-status": t.status },
    el("td", null, fmtTime(t.at)), el("td", null, t.member || t.member_id), el("td", null, t.loadbalancer_name || t.loadbalancer_id),
    el("td", null, badge(t.status), t.reason ? el("span", { class: "muted" }, " " + t.reason) : null), el("td", null, t.node))));

  $("changes").tBodies[0].replaceChildren(...s.changes.map(c => {
    const nodes = el("td", { class: "nodes" });
    const worst = Math.max(1, ...(c.nodes || []).map(n => ms(c.written_at, n.at)));
    for (const n of c.nodes || []) {
      const d = ms(c.written_at, n.at);
      const bar = el("span", { class: "bar" });
      bar.style.width = Math.round(d / worst * 60) + "px";
      nodes.append(el("span", { "data-node": n.node }, bar, n.node + " +" + fmtMs(d)));
    }
    for (const n of c.pending || []) nodes.append(el("span", { class: "pending", "data-pending": n }, n + " pending"));
    return el("tr", { "data-change": c.revision, "data-change-lb": c.loadbalancer_id, "data-pending-count": (c.pending || []).length },
      el("td", null, fmtTime(c.written_at)), el("td", null, c.loadbalancer_name || c.loadbalancer_id),
      el("td", { class: "num" }, c.revision), el("td", null, "+" + fmtMs(ms(c.written_at, c.applied_at))), nodes,
      el("td", null, c.active_at ? "+" + fmtMs(ms(c.written_at, c.active_at)) : "—"));
  }));
}

async function login(ev) {
  ev.preventDefault();
  const body = Object.fromEntries(new FormData(ev.target).entries());
  const r = await fetch(api + "login", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const got = await r.json().catch(() => ({}));
  if (!r.ok) { $("login-error").textContent = got.faultstring || ("HTTP " + r.status); return; }
  sessionStorage.setItem("flowlb-token", got.token);
  poll();
}

function useToken(ev) {
  ev.preventDefault();
  const t = new FormData(ev.target).get("token").trim();
  if (t) { sessionStorage.setItem("flowlb-token", t); poll(); }
}

async function start() {
  $("login-form").addEventListener("submit", login);
  $("token-form").addEventListener("submit", useToken);
  $("logout").addEventListener("click", () => { sessionStorage.removeItem("flowlb-token"); showLogin(""); });
  try {
    const cfg = await (await fetch(api + "config")).json();
    pollSeconds = cfg.poll_seconds || 2;
  } catch (e) { /* the state poll reports failures */ }
  poll();
}

document.addEventListener("DOMContentLoaded", start);
