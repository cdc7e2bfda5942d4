// The dashboard polls the planner's read-only JSON API every round and
// redraws the view shown; charts are SVGs the planner draws.
//
// A planner with an API token (http.token) answers 401 without it: the page
// then asks for the token, keeps it in this tab's sessionStorage and sends
// it as a header on every request, charts included (fetched, then shown as
// blob URLs, since an <img> cannot send a header).
"use strict";

const tokenKey = "caravan-planner-token";

// authError is a request the planner refused for its token.
class authError extends Error {}

function authHeaders() {
  const token = sessionStorage.getItem(tokenKey);
  return token ? { Authorization: "Bearer " + token } : {};
}

async function request(path) {
  const r = await fetch(path, { cache: "no-store", credentials: "same-origin", headers: authHeaders() });
  if (r.status === 401 || r.status === 403) {
    let msg = r.status + " " + r.statusText;
    try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new authError(msg);
  }
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()).trim());
  return r;
}

const views = ["gpus", "queue", "decisions", "results"];
let view = "gpus";
// Rounds come at most every planning.min_interval (1s by default).
const roundMs = 1000;
let plotAt = 0;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function seconds(s) {
  if (!(s > 0)) return "0s";
  if (s < 120) return s.toFixed(0) + "s";
  if (s < 7200) return (s / 60).toFixed(1) + "m";
  if (s < 172800) return (s / 3600).toFixed(1) + "h";
  return (s / 86400).toFixed(1) + "d";
}

async function get(path) {
  return (await request(path)).json();
}

// setPlot draws the SVG at path into img; the previous drawing stays until
// the new one has arrived.
async function setPlot(img, path) {
  try {
    const blob = await (await request(path)).blob();
    const old = img.dataset.blob;
    img.dataset.blob = img.src = URL.createObjectURL(blob);
    if (old) URL.revokeObjectURL(old);
  } catch (e) {
    if (e instanceof authError) askToken(e.message);
  }
}

function askToken(why) {
  const form = document.getElementById("login");
  const had = sessionStorage.getItem(tokenKey) !== null;
  document.getElementById("login-why").textContent = had ? "The planner refused the token: " + why : why;
  document.getElementById("status").textContent = "API token needed";
  form.hidden = false;
  document.getElementById("forget").hidden = !had;
}

document.getElementById("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(tokenKey, input.value.trim());
  input.value = "";
  document.getElementById("login").hidden = true;
  document.getElementById("forget").hidden = false;
  plotAt = 0;
  loop();
});

document.getElementById("forget").addEventListener("click", () => {
  sessionStorage.removeItem(tokenKey);
  document.getElementById("forget").hidden = true;
  loop();
});

function show(name) {
  if (!views.includes(name)) name = "gpus";
  view = name;
  for (const v of views) {
    document.getElementById("view-" + v).classList.toggle("active", v === name);
  }
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.view === name);
  }
  plotAt = 0;
}

// With many nodes only the first few are open at first; the others show
// their summary line until opened, so that the map stays quick to draw.
const nodesOpenAtFirst = 4;
// Which nodes the user opened or closed, kept across redraws.
const nodeOpen = new Map();
// The latest map, node → GPU → its lanes' slots, drawn into a node as it
// opens.
let gpusByNode = new Map();

function byNodeAndGPU(lanes) {
  const byNode = new Map();
  for (const l of lanes) {
    if (!byNode.has(l.node)) byNode.set(l.node, new Map());
    const gpus = byNode.get(l.node);
    if (!gpus.has(l.gpu)) gpus.set(l.gpu, []);
    gpus.get(l.gpu).push(l);
  }
  return byNode;
}

// nodeSummary is a node's line on the map: its busy GPUs (a lane counting
// as its share of its GPU, as the planner counts them), lanes and
// unhealthy GPUs.
function nodeSummary(node, gpus) {
  let busy = 0, lanes = 0, lanesHeld = 0, unhealthy = 0;
  for (const slots of gpus.values()) {
    const held = new Map();
    const laneNames = new Set();
    for (const s of slots) {
      if (s.lane) laneNames.add(s.lane);
      if (s.job) held.set(s.lane, s.gpu_share);
    }
    busy += Math.min(1, [...held.values()].reduce((a, b) => a + b, 0));
    lanes += laneNames.size;
    lanesHeld += [...held.keys()].filter((l) => l).length;
    if (!slots.every((s) => s.healthy)) unhealthy++;
  }
  return node + " · " + (Number.isInteger(busy) ? busy : busy.toFixed(2)) + "/" + gpus.size + " GPUs busy" +
    (lanes ? " · " + lanesHeld + "/" + lanes + " lanes in use" : "") +
    (unhealthy ? " · " + unhealthy + " unhealthy" : "");
}

function gpuCards(gpus) {
  const box = el("div", { class: "gpus" });
  for (const [gpu, lanes] of gpus) {
    const healthy = lanes.every((l) => l.healthy);
    const card = el("div", { class: "gpu" + (healthy ? "" : " unhealthy"), "data-gpu": gpu },
      el("h3", { text: lanes[0].model + " · " + gpu.slice(0, 12) + (healthy ? "" : " · unhealthy") }));
    const byLane = new Map();
    for (const l of lanes) {
      const k = l.lane || "whole GPU";
      if (!byLane.has(k)) byLane.set(k, []);
      byLane.get(k).push(l);
    }
    for (const [lane, slots] of byLane) {
      const row = el("div", { class: "lane" },
        el("div", { class: "lane-name", text: lane + " · " + slots[0].memory_mib + " MiB budget · " + Math.round(slots[0].gpu_share * 100) + "% of the GPU" }));
      for (const s of slots) {
        let cls = "slot";
        if (!s.healthy) cls += " unhealthy";
        if (s.job) cls += " held";
        if (s.task_state === "suspended" || s.task_state === "checkpointed") cls += " " + s.task_state;
        let label = s.job ? s.job + (s.task ? " / " + s.task : "") : "free";
        if (s.task_state === "suspended") label += " (suspended)";
        if (s.task_state === "checkpointed") label += " (checkpointed)";
        if (!s.healthy) label += " — " + (s.health || "unhealthy");
        const slot = el("span", { class: cls, "data-instance": s.instance, "data-job": s.job || "", title: s.instance }, label);
        if (s.memory_used_mib != null) {
          const pct = Math.min(100, (100 * s.memory_used_mib) / Math.max(1, s.memory_mib));
          slot.append(" · " + s.memory_used_mib + "/" + s.memory_mib + " MiB",
            el("span", { class: "mem" }, el("span", { style: "width:" + pct.toFixed(0) + "%" })));
        }
        row.append(slot);
      }
      card.append(row);
    }
    box.append(card);
  }
  return box;
}

// drawNode draws an open node's GPUs and drops a closed one's.
function drawNode(details) {
  const gpus = gpusByNode.get(details.dataset.node);
  details.replaceChildren(details.firstElementChild, ...(details.open && gpus ? [gpuCards(gpus)] : []));
}

function drawGPUs(m) {
  gpusByNode = byNodeAndGPU(m.lanes || []);
  const root = document.getElementById("gpus");
  // A node keeps its element, and so its open state, across redraws.
  const shown = new Map(Array.from(root.children, (d) => [d.dataset.node, d]));
  const nodes = [];
  for (const [node, gpus] of gpusByNode) {
    let details = shown.get(node);
    if (!details) {
      details = el("details", { class: "node", "data-node": node }, el("summary"));
      details.open = nodeOpen.get(node) ?? nodes.length < nodesOpenAtFirst;
      details.addEventListener("toggle", () => {
        nodeOpen.set(node, details.open);
        drawNode(details);
      });
    }
    details.firstElementChild.textContent = nodeSummary(node, gpus);
    drawNode(details);
    nodes.push(details);
  }
  if (nodes.length !== root.children.length || nodes.some((d, i) => root.children[i] !== d)) root.replaceChildren(...nodes);
  document.getElementById("gpus-summary").textContent =
    gpusByNode.size + " nodes, " + m.gpus + " GPUs, " + m.busy_gpus.toFixed(2) + " busy" +
    (m.stats_error ? " · GPU memory in use unavailable: " + m.stats_error : "");
}

// The queue is read a page at a time: a large cluster's queue holds more
// jobs than a page can redraw every round.
const queuePageSize = 100;
// How long the filter waits for typing to pause before it asks the planner.
const filterPauseMs = 300;
let queueOffset = 0;
let queueFilter = "";

function queuePath() {
  return "../v1/queue?offset=" + queueOffset + "&limit=" + queuePageSize +
    (queueFilter ? "&filter=" + encodeURIComponent(queueFilter) : "");
}

function drawQueue(q) {
  const jobs = q.jobs || [];
  // The queue shrank below this page: show its last page instead.
  if (jobs.length === 0 && q.total > 0 && queueOffset > 0) {
    queueOffset = Math.floor((q.total - 1) / queuePageSize) * queuePageSize;
    loop();
    return;
  }
  const body = document.getElementById("queue");
  body.replaceChildren();
  for (const j of jobs) {
    body.append(el("tr", { "data-job": j.namespace + "/" + j.job },
      el("td", { class: "num", text: j.rank }),
      el("td", { text: j.namespace + "/" + j.job }),
      el("td", { text: j.group || "" }),
      el("td", { text: j.state + (j.run ? "" : " (held)") }),
      el("td", { class: "num", text: j.queue }),
      el("td", { class: "num", text: j.band }),
      el("td", { class: "num", text: j.priority }),
      el("td", { class: "num", text: j.gpus }),
      el("td", { class: "num", text: j.attained_gpu_seconds.toFixed(0) + " GPU-s" }),
      el("td", { class: "num", text: seconds(j.waiting_seconds) }),
      el("td", { text: (j.planned_gpu_model || "any") + (j.lane ? " (lane)" : "") }),
      el("td", { class: "reason", text: j.reason })));
  }
  document.getElementById("queue-summary").textContent =
    q.total + " managed jobs" + (queueFilter ? " matching “" + queueFilter + "”" : "") + ", " + q.running +
    " running, in rank order, as of " + new Date(q.time).toLocaleTimeString() +
    (q.leader ? "" : " · this replica follows: it writes nothing");
  document.getElementById("queue-range").textContent = jobs.length
    ? "rows " + (q.offset + 1) + "–" + (q.offset + jobs.length) + " of " + q.total
    : "no rows";
  document.getElementById("queue-prev").disabled = queueOffset === 0;
  document.getElementById("queue-next").disabled = q.offset + jobs.length >= q.total;
}

document.getElementById("queue-prev").addEventListener("click", () => {
  queueOffset = Math.max(0, queueOffset - queuePageSize);
  loop();
});

document.getElementById("queue-next").addEventListener("click", () => {
  queueOffset += queuePageSize;
  loop();
});

let filterTimer = null;
document.getElementById("queue-filter").addEventListener("input", (ev) => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => {
    queueFilter = ev.target.value.trim();
    queueOffset = 0;
    loop();
  }, filterPauseMs);
});

function drawDecisions(d) {
  const body = document.getElementById("decisions");
  body.replaceChildren();
  for (const x of d.decisions || []) {
    body.append(el("tr", { "data-job": x.namespace + "/" + x.job, "data-outcome": x.outcome },
      el("td", { text: new Date(x.time).toLocaleTimeString() }),
      el("td", { text: x.namespace + "/" + x.job }),
      el("td", { text: x.action || "" }),
      el("td", { class: "num", text: x.priority }),
      el("td", { class: "outcome-" + x.outcome, text: x.outcome + (x.error ? ": " + x.error : "") }),
      el("td", { text: (x.changes || []).join(", ") }),
      el("td", { class: "reason", text: x.reason }),
      el("td", { class: "reason", text: x.override || "" })));
  }
}

function drawResults(r) {
  document.getElementById("results-summary").textContent =
    "Live cluster since " + new Date(r.since).toLocaleString() + " · completed jobs: " + r.completed_jobs +
    (r.completed_jobs ? ", mean JCT " + seconds(r.mean_jct_seconds) + ", median " + seconds(r.median_jct_seconds) : "") +
    " · " + r.busy_gpus.toFixed(2) + " of " + r.gpus + " GPUs busy now, " + (100 * r.gpu_utilization).toFixed(1) + "% utilisation overall";
  const now = Date.now();
  if (now - plotAt > 5000) {
    plotAt = now;
    setPlot(document.getElementById("plot-jct"), "plots/jct.svg");
    setPlot(document.getElementById("plot-util"), "plots/util.svg");
  }
  const pick = document.getElementById("folders");
  const folders = r.folders || [];
  document.getElementById("folders-none").hidden = folders.length > 0;
  document.getElementById("folders-pick").hidden = folders.length === 0;
  const have = Array.from(pick.options).map((o) => o.value).join("\n");
  if (have !== folders.join("\n")) {
    const keep = pick.value;
    pick.replaceChildren(...folders.map((f) => el("option", { value: f, text: f })));
    if (folders.includes(keep)) pick.value = keep;
    drawFolder();
  }
}

function drawFolder() {
  const pick = document.getElementById("folders");
  const img = document.getElementById("plot-folder");
  img.hidden = !pick.value;
  if (pick.value) setPlot(img, "plots/results.svg?folder=" + encodeURIComponent(pick.value));
}

async function refresh() {
  const err = document.getElementById("error");
  try {
    const status = await get("../v1/status");
    document.getElementById("status").textContent =
      "policy " + status.policy + " · " + (status.leader ? "leader" : "follower") + " · " + status.rounds + " rounds";
    if (view === "gpus") drawGPUs(await get("../v1/gpus"));
    if (view === "queue") {
      const path = queuePath();
      const q = await get(path);
      // A page or filter chosen while the request was out asks again.
      if (path === queuePath()) drawQueue(q);
    }
    if (view === "decisions") drawDecisions(await get("../v1/decisions?limit=200"));
    if (view === "results") drawResults(await get("../v1/results"));
    err.hidden = true;
    document.getElementById("login").hidden = true;
  } catch (e) {
    if (e instanceof authError) {
      askToken(e.message);
      err.hidden = true;
      return;
    }
    err.textContent = "cannot reach the planner: " + e.message;
    err.hidden = false;
  }
}

let timer = null;
let generation = 0;
function loop() {
  // A view change starts a new chain; the old one ends at its next turn.
  const g = ++generation;
  clearTimeout(timer);
  // Asking for the token stops the polling until one is given.
  refresh().finally(() => {
    if (g === generation && document.getElementById("login").hidden) timer = setTimeout(loop, roundMs);
  });
}

document.getElementById("folders").addEventListener("change", drawFolder);
window.addEventListener("hashchange", () => { show(location.hash.slice(1)); loop(); });
document.getElementById("forget").hidden = sessionStorage.getItem(tokenKey) === null;
show(location.hash.slice(1) || "gpus");
loop();
