/**
 * The live status page the launcher serves at `GET /`: one self-contained
 * HTML document (the machines are offline: no CDN, no fonts, no scripts from
 * elsewhere). It reads `RunState` (RunView.ts) from `events` (Server-Sent
 * Events, `event: state`) and once from `state.json`, and draws it. Both
 * need the run's page token: the page passes on its own URL's query (the
 * `?token=…` of the URL the launcher prints), which keeps it out of the page.
 *
 * Every datum goes in through textContent or setAttribute, never innerHTML:
 * host names, causes and metric names come from users.
 *
 * Hooks for tests (stable): data-testid = run, phase (text is exactly the
 * phase word), connection (data-state: connecting | live | reconnecting |
 * closed), counts, elapsed, countdown, verdict, training, epoch, samples,
 * rate, progress, metrics, throughput (svg, data-points), hosts, host
 * (data-host, data-state), rank-<n> (data-state, data-rank, data-host),
 * rank-<n> > rankmetrics > .metric (data-metric: the rank's own latest
 * reported metrics; \`metrics\` holds their averages), deaths > death
 * (data-rank), hosts-gone > li (data-host). <body data-phase>.
 */

const style = `
:root{--bg:#f6f6f4;--fg:#1d1f22;--mut:#676c74;--card:#fff;--line:#d8dadf;--acc:#2563eb;--ok:#15803d;--warn:#b45309;--bad:#c0262d;--idle:#6b7280;color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#121417;--fg:#e5e7ea;--mut:#9aa0a9;--card:#1b1e23;--line:#2d3138;--acc:#60a5fa;--ok:#4ade80;--warn:#fbbf24;--bad:#f87171;--idle:#9ca3af}}
*{box-sizing:border-box}
body{margin:0 auto;max-width:72rem;padding:.75rem;font:14px/1.4 system-ui,sans-serif;background:var(--bg);color:var(--fg);overflow-wrap:anywhere;font-variant-numeric:tabular-nums}
header{display:flex;flex-wrap:wrap;align-items:center;gap:.3rem .75rem}
h1{font-size:1.3rem;margin:0}
h2{font-size:.75rem;text-transform:uppercase;letter-spacing:.06em;color:var(--mut);margin:1rem 0 .4rem}
p{margin:.4rem 0}
.phase{font-weight:700;font-size:1.1rem;padding:.05rem .7rem;border-radius:1rem;background:var(--idle);color:var(--bg)}
.phase:empty{display:none}
[data-phase=forming] .phase{background:var(--warn)}
[data-phase=training] .phase{background:var(--acc)}
[data-phase=done] .phase{background:var(--ok)}
[data-phase=failed] .phase{background:var(--bad)}
#conn{margin-left:auto;font-size:.85rem;color:var(--mut)}
#conn::before{content:"\\25CF  ";color:var(--idle)}
#conn[data-state=live]::before{color:var(--ok)}
#conn[data-state=reconnecting]::before{color:var(--warn)}
#conn[data-state=closed]::before{color:var(--bad)}
.row{display:flex;flex-wrap:wrap;gap:.2rem 1rem;align-items:baseline}
.mut{color:var(--mut)}
#join{font-size:1.05rem;font-weight:600}
#verdict{font-weight:600;padding:.5rem .75rem;border-left:4px solid var(--ok);background:var(--card)}
[data-phase=failed] #verdict{border-left-color:var(--bad)}
.bar{height:.6rem;margin:.35rem 0;background:var(--line);border-radius:.3rem;overflow:hidden}
#fill{height:100%;width:0;background:var(--acc);transition:width .2s}
.metric .k{color:var(--mut)}
svg{display:block;width:100%;height:7rem;background:var(--card);border:1px solid var(--line);border-radius:.3rem}
.area{fill:var(--acc);opacity:.15}
.line{fill:none;stroke:var(--acc);stroke-width:2}
.host{margin-bottom:.8rem}
.hosthead{display:flex;flex-wrap:wrap;gap:.2rem .5rem;align-items:baseline;margin-bottom:.3rem}
.badge{font-size:.75rem;padding:0 .45rem;border:1px solid;border-radius:.6rem;color:var(--mut)}
.badge[data-state=joined]{color:var(--ok)}
.badge[data-state=gone]{color:var(--bad)}
.cells{display:grid;grid-template-columns:repeat(auto-fill,minmax(10rem,1fr));gap:.4rem}
.rank{min-width:0;padding:.3rem .45rem;font-size:.8rem;background:var(--card);border:1px solid var(--line);border-left:4px solid var(--idle);border-radius:.3rem}
.rank[data-state=starting]{border-left-color:var(--warn)}
.rank[data-state=running]{border-left-color:var(--ok)}
.rank[data-state=dead]{border-left-color:var(--bad)}
.rank .top{display:flex;justify-content:space-between;gap:.3rem}
.rank .top span{color:var(--mut)}
.rank[data-state=dead] .top span{color:var(--bad);font-weight:700}
.rank .row{gap:0 .5rem}
.why{color:var(--bad)}
.rank .why{display:-webkit-box;-webkit-line-clamp:2;-webkit-box-orient:vertical;overflow:hidden}
ul{margin:0;padding-left:1.2rem}
`

// Plain JS, no template literals: it lives inside a TS template string.
const script = `
"use strict";
var $ = function (id) { return document.getElementById(id); };
var SVG = "http://www.w3.org/2000/svg";
var cur = null, gotAt = 0, conn = "connecting", lostAt = 0, es = null;

// Elements from text only: append(string) makes a Text node.
function el(tag, attrs) {
  var e = document.createElement(tag);
  for (var k in attrs || {}) {
    var v = attrs[k];
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v; else e.setAttribute(k, String(v));
  }
  for (var i = 2; i < arguments.length; i++) {
    var c = arguments[i];
    if (c !== null && c !== undefined && c !== false) e.append(c);
  }
  return e;
}
function num(n) { return Math.round(n).toLocaleString(); }
function mib(b) { return Math.round(b / 1048576).toLocaleString() + " MiB"; }
function gpuMem(b) { return b >= 1073741824 ? (b / 1073741824).toFixed(1) + " GiB" : mib(b); }
function dur(ms) {
  var s = Math.max(0, Math.ceil(ms / 1000));
  if (s < 60) return s + " s";
  var m = Math.floor(s / 60);
  return m < 60 ? m + "m " + (s % 60) + "s" : Math.floor(m / 60) + "h " + (m % 60) + "m";
}
function clock(at) { return new Date(at).toLocaleTimeString([], { hour12: false }); }
function metric(k, v) {
  if (typeof v !== "number" || !isFinite(v)) return String(v);
  if (/acc/i.test(k) && v >= 0 && v <= 1) return (v * 100).toFixed(2) + "%";
  return Math.abs(v) >= 1000 ? num(v) : String(Number(v.toPrecision(4)));
}
function spans(m) {
  return Object.keys(m).map(function (k) { return el("span", { class: "metric", "data-metric": k }, el("span", { class: "k" }, k), " " + metric(k, m[k])); });
}
function ended() { return cur !== null && (cur.phase === "done" || cur.phase === "failed"); }

function setConn(state, text) {
  conn = state;
  var c = $("conn");
  c.setAttribute("data-state", state);
  c.textContent = text;
}

// Only one clock matters: the launcher's. Countdowns move locally from when a state arrived.
function tick() {
  if (cur === null) return;
  var since = conn === "live" && !ended() ? Date.now() - gotAt : 0;
  var j = $("join");
  j.hidden = !(cur.phase === "waiting" && cur.windowRemainingMs != null);
  if (!j.hidden) j.textContent = joinText(cur, since);
  $("elapsed").textContent = "started " + clock(cur.startedAt) + ", " + (ended() ? "ran " : "elapsed ") + dur(cur.updatedAt - cur.startedAt + since);
  if (conn === "reconnecting") $("conn").textContent = "connection lost " + dur(Date.now() - lostAt) + " ago; reconnecting\\u2026";
}

// The window while open; once closed without a quorum (or, start: manual, without the operator's start),
// what it waits for until the hard cap.
function joinText(s, since) {
  var cap = s.capRemainingMs != null ? "hard cap in " + dur(s.capRemainingMs - since) : null;
  var rule = s.joinRule, quorum = rule ? "the quorum (" + s.joinedRanks + "/" + rule.quorum + " ranks)" : "more ranks";
  if (rule && rule.start === "manual") {
    return "join window waits for " + (s.joinedRanks >= rule.quorum ? "the operator's start (bun run status --start)" : quorum) + (cap ? ", " + cap : "");
  }
  if (s.windowRemainingMs - since > 0) return "join window closes in " + dur(s.windowRemainingMs - since) + (cap ? " (" + cap + ")" : "");
  return "join window closed: waiting for " + quorum + (cap ? ", " + cap : "");
}

function rankCell(r, cause) {
  var res = r.resources, kids = [
    el("div", { class: "top" }, el("b", null, "r" + r.rank), el("span", null, r.state)),
    el("div", null, (r.device === "cpu" ? "cpu" : "device " + r.device) + (r.pid != null ? " \\u00b7 pid " + r.pid : ""))
  ];
  var ex = [r.exit, r.restarts ? r.restarts + (r.restarts > 1 ? " restarts" : " restart") : null].filter(Boolean);
  if (ex.length) kids.push(el("div", null, ex.join(" \\u00b7 ")));
  // An ended rank uses nothing: no figures left over from its last sample.
  if (res && r.state !== "exited" && r.state !== "dead") {
    kids.push(el("div", null, "cpu " + Math.round(res.cpu * 100) + "% \\u00b7 " + mib(res.rssBytes)));
    var g = [res.gpuMemoryBytes != null ? gpuMem(res.gpuMemoryBytes) : null,
      res.gpuUtilization != null ? Math.round(res.gpuUtilization * 100) + "% util" : null].filter(Boolean);
    if (g.length) kids.push(el("div", null, "gpu " + g.join(" \\u00b7 ")));
  } else if (r.lastResources && r.state === "dead") {
    // What it used when it died (a rank killed for its memory shows it), not what it uses now.
    kids.push(el("div", null, "last " + mib(r.lastResources.rssBytes)));
  }
  // Its own latest report (the averages are above)
  var ms = spans(r.metrics || {});
  if (ms.length) {
    var line = el("div", { class: "row", "data-testid": "rankmetrics" });
    line.append.apply(line, ms);
    kids.push(line);
  }
  if (cause && r.state === "dead") kids.push(el("div", { class: "why" }, cause));
  var cell = el("div", { class: "rank", "data-testid": "rank-" + r.rank, "data-state": r.state, "data-rank": r.rank, "data-host": r.host, title: cause || null });
  cell.append.apply(cell, kids);
  return cell;
}

function renderHosts(s) {
  // Grouped by host in the launcher's order; ranks of a host it does not list still show.
  var groups = new Map(), causes = new Map(), out = [];
  s.hosts.forEach(function (h) { groups.set(h.host, { h: h, ranks: [] }); });
  s.ranks.forEach(function (r) {
    if (!groups.has(r.host)) groups.set(r.host, { h: null, ranks: [] });
    groups.get(r.host).ranks.push(r);
  });
  s.deaths.forEach(function (d) { causes.set(d.rank, d.cause); }); // the latest cause wins
  groups.forEach(function (g, name) {
    var state = g.h ? g.h.state : "joined";
    var cells = el("div", { class: "cells" });
    if (g.ranks.length) cells.append.apply(cells, g.ranks.map(function (r) { return rankCell(r, causes.get(r.rank)); }));
    else cells.append(el("span", { class: "mut" }, g.h ? g.h.declaredRanks + " rank(s) declared" : ""));
    out.push(el("section", { class: "host", "data-testid": "host", "data-host": name, "data-state": state },
      el("div", { class: "hosthead" }, el("strong", { class: "hostname" }, name), el("span", { class: "badge", "data-state": state }, state),
        g.h && g.h.reason ? el("span", { class: "why" }, g.h.reason) : null),
      cells));
  });
  $("hosts").replaceChildren.apply($("hosts"), out);
}

function renderChart(points) {
  var svg = $("chart"), W = 600, H = 120;
  svg.setAttribute("data-points", points.length);
  if (points.length < 2) { svg.replaceChildren(); $("chartnote").textContent = "no throughput yet"; return; }
  var t0 = points[0].at, span = Math.max(1, points[points.length - 1].at - t0), max = 0;
  points.forEach(function (p) { max = Math.max(max, p.samplesPerSec); });
  var top = max > 0 ? max * 1.1 : 1;
  var xy = points.map(function (p) { return ((p.at - t0) / span * W).toFixed(1) + "," + (H - p.samplesPerSec / top * H).toFixed(1); }).join(" ");
  var area = document.createElementNS(SVG, "polygon"), line = document.createElementNS(SVG, "polyline");
  area.setAttribute("class", "area");
  area.setAttribute("points", "0," + H + " " + xy + " " + W + "," + H);
  line.setAttribute("class", "line");
  line.setAttribute("points", xy);
  line.setAttribute("vector-effect", "non-scaling-stroke"); // the svg stretches; the stroke must not
  svg.replaceChildren(area, line);
  $("chartnote").textContent = "samples/s over the last " + dur(span) + ": latest " + num(points[points.length - 1].samplesPerSec) + ", peak " + num(max);
}

function render(s) {
  cur = s;
  gotAt = Date.now();
  document.body.setAttribute("data-phase", s.phase);
  document.title = s.run + ": " + s.phase + " \\u00b7 cohort";
  $("run").textContent = s.run;
  $("phase").textContent = s.phase;

  var n = { starting: 0, running: 0, exited: 0, dead: 0 };
  s.ranks.forEach(function (r) { n[r.state] = (n[r.state] || 0) + 1; });
  var parts = [s.joinedRanks + "/" + s.world + " ranks joined", s.joinedHosts + "/" + s.hosts.length + " hosts"];
  // Growth: the world over time, as sizes after formation (e.g. "world 2 → 3 → 2").
  if (s.joinedAfterFormation > 0) {
    var sizes = (s.worldSizes || []).map(function (w) { return w.alive; }).filter(function (v, i, all) { return i === 0 || v !== all[i - 1]; });
    parts.push(s.joinedAfterFormation + " joined after formation (world " + sizes.slice(-8).join(" \u2192 ") + ")");
  }
  Object.keys(n).forEach(function (k) { if (n[k]) parts.push(n[k] + " " + k); });
  $("counts").textContent = parts.join(" \\u00b7 ");

  $("verdict").hidden = !s.verdict;
  $("verdict").textContent = s.verdict || "";

  var t = s.training;
  $("training").hidden = !t && !s.throughput.length;
  $("progressrow").hidden = !t;
  if (t) {
    var pct = t.datasetSize > 0 ? Math.min(100, t.samplesDone / t.datasetSize * 100) : 0;
    $("epoch").textContent = "epoch " + t.epoch + "/" + t.epochs;
    $("samples").textContent = num(t.samplesDone) + " / " + num(t.datasetSize) + " samples (" + Math.floor(pct) + "%)";
    $("rate").textContent = t.samplesPerSec != null ? num(t.samplesPerSec) + " samples/s" : "";
    $("fill").style.width = pct.toFixed(2) + "%";
    $("bar").setAttribute("aria-valuenow", Math.floor(pct));
    $("metrics").replaceChildren.apply($("metrics"), spans(t.metrics));
  }
  renderChart(s.throughput);
  renderHosts(s);

  $("deathbox").hidden = !s.deaths.length;
  $("deaths").replaceChildren.apply($("deaths"), s.deaths.map(function (d) {
    return el("li", { "data-testid": "death", "data-rank": d.rank }, el("b", null, "r" + d.rank), " on " + d.host + " at " + clock(d.at) + ": " + d.cause);
  }));
  var c = (s.recovery && s.recovery.deaths) || [], r = c.filter(function (d) { return d.recoveredAt !== null; });
  var ms = function (l, k) { return l.map(function (d) { return Math.round(d[k] - d.diedAt); }).join("/") + " ms"; };
  $("recovery").hidden = !c.length;
  var e = s.effectiveTraining;
  $("recovery").textContent = c.length + " death(s) carried: detected in " + ms(c, "knownAt") + ", recovered in " + (r.length ? ms(r, "recoveredAt") : "none yet") + (e != null ? "; effective training " + (e * 100).toFixed(1) + "%" : "");
  var gone = s.hosts.filter(function (h) { return h.state === "gone"; });
  $("gonebox").hidden = !gone.length;
  $("gone").replaceChildren.apply($("gone"), gone.map(function (h) {
    return el("li", { "data-host": h.host }, el("b", null, h.host), ": " + (h.reason || "gone"));
  }));
  tick();
}

function accept(s) {
  if (!s || typeof s !== "object" || typeof s.phase !== "string") return;
  ["hosts", "ranks", "deaths", "throughput"].forEach(function (k) { if (!Array.isArray(s[k])) s[k] = []; });
  // state.json and the stream race at load: never step back within one run.
  if (cur !== null && cur.startedAt === s.startedAt && s.updatedAt < cur.updatedAt) return;
  render(s);
}

function connect() {
  es = new EventSource("events" + location.search);
  es.onopen = function () { lostAt = 0; setConn("live", "live"); };
  es.addEventListener("state", function (e) {
    if (conn !== "live") { lostAt = 0; setConn("live", "live"); }
    try { accept(JSON.parse(e.data)); } catch (err) { console.warn("bad state event", err); }
  });
  es.onerror = function () {
    // A finished run's launcher exits: keep its last state, stop knocking.
    if (ended()) { es.close(); setConn("closed", "connection closed: the launcher is gone (run ended)"); return; }
    if (!lostAt) lostAt = Date.now();
    setConn("reconnecting", "connection lost; reconnecting\\u2026");
    // EventSource gives up for good on an HTTP error or a wrong content type: start over ourselves.
    if (es.readyState === EventSource.CLOSED) setTimeout(connect, 3000);
    tick();
  };
}

fetch("state.json" + location.search).then(function (r) { return r.ok ? r.json() : null; }).then(accept, function () {});
connect();
setInterval(tick, 250);
`

const body = `
<header>
<h1 id="run" data-testid="run">cohort</h1>
<span id="phase" class="phase" data-testid="phase"></span>
<span id="conn" data-testid="connection" data-state="connecting">connecting\u2026</span>
</header>
<p class="row"><span id="counts" data-testid="counts">waiting for the launcher's first state\u2026</span><span id="elapsed" class="mut" data-testid="elapsed"></span></p>
<p id="join" data-testid="countdown" hidden></p>
<p id="verdict" data-testid="verdict" hidden></p>
<section id="training" data-testid="training" hidden>
<h2>Training</h2>
<div id="progressrow">
<div class="row"><b id="epoch" data-testid="epoch"></b><span id="samples" data-testid="samples"></span><span id="rate" data-testid="rate"></span></div>
<div id="bar" class="bar" data-testid="progress" role="progressbar" aria-valuemin="0" aria-valuemax="100"><div id="fill"></div></div>
<div id="metrics" class="row" data-testid="metrics"></div>
</div>
<svg id="chart" data-testid="throughput" viewBox="0 0 600 120" preserveAspectRatio="none" role="img" aria-label="samples per second over time"></svg>
<p id="chartnote" class="mut"></p>
</section>
<section><h2>Hosts and ranks</h2><div id="hosts" data-testid="hosts"></div></section>
<section id="deathbox" hidden><h2>Deaths</h2><ul id="deaths" data-testid="deaths"></ul><p id="recovery" class="mut" data-testid="recovery" hidden></p></section>
<section id="gonebox" hidden><h2>Hosts gone</h2><ul id="gone" data-testid="hosts-gone"></ul></section>
`

// The script's comments are for whoever reads this file, not for every browser that loads the page: whole-line
// ones are left out of the document (the script has no multi-line strings, so such a line is always a comment).
const wholeLineComments = /^[ \t]*\/\/.*\n/gm

export const dashboardPage: string = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>cohort</title>
<link rel="icon" href="data:,">
<style>${style}</style>
</head>
<body>${body}<script>${script.replace(wholeLineComments, "")}</script>
</body>
</html>
`
