"""The HTML page of `python -m audit.view`: plain HTML, CSS and JavaScript, no library, no network.

`audit.view.render` fills `__TITLE__` (escaped), `__PAGE_SIZE__` and `__DATA__` (JSON escaped for a
<script> element). The script builds every element with `createElement` and puts every text from
the data in with `append(string)`, which makes a text node: nothing from a run is ever parsed as
markup. Filters and the page number live in the URL's fragment (`#view=audit&kind=impossible`), so a
view can be linked to and reopened.
"""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
:root { --fg: #1d2330; --muted: #667085; --line: #d9dee7; --bg: #f6f7f9; --ok: #1f7a3f; --bad: #b42318;
        --warn: #9a6700; --flag: #fff1e6; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { position: sticky; top: 0; z-index: 2; background: #fff; border-bottom: 1px solid var(--line); padding: 10px 18px; }
h1 { font-size: 17px; margin: 0 0 4px; }
#summary { color: var(--muted); font-size: 12.5px; margin-bottom: 8px; }
nav { display: flex; flex-wrap: wrap; gap: 10px 16px; align-items: center; }
nav label { display: inline-flex; gap: 5px; align-items: center; }
select, input[type=search], button { font: inherit; padding: 3px 6px; border: 1px solid var(--line); border-radius: 5px; background: #fff; }
button { cursor: pointer; }
button:disabled { opacity: .4; cursor: default; }
.pager { display: flex; gap: 8px; align-items: center; margin: 8px 0 0; color: var(--muted); }
main { padding: 12px 18px 30px; }
section.env { background: #fff; border: 1px solid var(--line); border-radius: 8px; margin: 0 0 14px; padding: 10px 14px; }
section.env h2 { font-size: 15px; margin: 0 0 6px; display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; }
.badge { font-size: 11.5px; font-weight: 500; padding: 1px 7px; border-radius: 9px; background: #eef1f6; color: var(--muted); }
.badge.impossible { background: #fdecea; color: var(--bad); }
.badge.control { background: #e8f4ec; color: var(--ok); }
details.anchor { margin: 4px 0 8px; }
details.anchor summary { cursor: pointer; color: var(--muted); }
details.anchor .box { margin: 6px 0 0; padding: 8px 10px; background: var(--bg); border-radius: 6px; }
.box h5 { margin: 8px 0 2px; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
pre, .text { white-space: pre-wrap; word-break: break-word; margin: 0; font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
.text { max-height: 11em; overflow: auto; }
.text.open { max-height: none; }
h3 { font-size: 13.5px; margin: 10px 0 4px; }
h4 { font-size: 12.5px; margin: 8px 0 4px; color: var(--muted); font-weight: 600; }
table { width: 100%; border-collapse: collapse; table-layout: fixed; }
th.answer { width: 48%; } th.narrow { width: 6.5em; }
th, td { text-align: left; vertical-align: top; padding: 4px 6px; border-top: 1px solid var(--line); font-size: 12.5px; overflow-wrap: anywhere; }
th { color: var(--muted); font-weight: 600; border-top: none; }
td.num { font-variant-numeric: tabular-nums; }
tr.flagged td { background: var(--flag); }
.ok { color: var(--ok); } .bad { color: var(--bad); } .warn { color: var(--warn); } .muted { color: var(--muted); }
.pairs { color: var(--muted); font-size: 12px; margin: 2px 0 6px; }
.cols { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.cols > div { min-width: 0; }
.cols table { table-layout: auto; }
.cols th.answer { width: 45%; }
.empty { color: var(--muted); padding: 20px 0; }
</style>
</head>
<body>
<header>
  <h1>Run viewer</h1>
  <div id="summary"></div>
  <nav>
    <label>view <select id="view">
      <option value="train">training samples</option>
      <option value="audit">audit answers</option>
      <option value="compare">t = first beside t = last</option>
    </select></label>
    <label>reward <select id="reward"></select></label>
    <label>seed <select id="seed"></select></label>
    <label>kind <select id="kind"><option value="">all</option><option>impossible</option><option>control</option></select></label>
    <label><input type="checkbox" id="flagged"> judge preferred what the oracle rejects</label>
    <label><input type="search" id="search" placeholder="task id or answer text"></label>
  </nav>
  <div class="pager" id="pager"></div>
</header>
<main id="envs"></main>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const PAGE_SIZE = __PAGE_SIZE__;
const $ = (id) => document.getElementById(id);

function el(tag, cls, ...kids) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}
const fmt = (x) => (x === null || x === undefined) ? "—" : (Math.abs(x) >= 100 ? x.toFixed(0) : x.toFixed(3));
const runName = (r) => `${D.runs[r].reward} · seed ${D.runs[r].seed}`;

// -- state, kept in the URL fragment -----------------------------------------------------------------
const state = {view: "train", reward: "", seed: "", kind: "", flagged: false, q: "", page: 0};
function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  for (const k of Object.keys(state)) if (h.has(k)) {
    state[k] = k === "flagged" ? h.get(k) === "1" : k === "page" ? (parseInt(h.get(k), 10) || 0) : h.get(k);
  }
}
function writeHash() {
  const h = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) if (v !== "" && v !== false && !(k === "page" && v === 0) && !(k === "view" && v === "train"))
    h.set(k, v === true ? "1" : v);
  history.replaceState(null, "", "#" + h.toString());
}

function options(select, values, label) {
  select.replaceChildren(el("option", null, "all"));
  select.firstChild.value = "";
  for (const v of values) { const o = el("option", null, label ? label(v) : v); o.value = v; select.append(o); }
}

// -- rows that pass the filters --------------------------------------------------------------------
function runOk(r) {
  const run = D.runs[r];
  return (!state.reward || run.reward === state.reward) && (!state.seed || String(run.seed) === state.seed);
}
function envOk(task) {
  const env = D.envs[task] || {};
  return !state.kind || env.kind === state.kind;
}
function textOk(row) {
  if (!state.q) return true;
  const q = state.q.toLowerCase();
  return row.task.toLowerCase().includes(q) || D.texts[row.text].toLowerCase().includes(q);
}
function rowsOf(list) {
  return list.filter((r) => runOk(r.run) && envOk(r.task) && (!state.flagged || r.flagged) && textOk(r));
}

// -- cells -----------------------------------------------------------------------------------------
function answerCell(row) {
  const t = el("div", "text", D.texts[row.text]);
  t.title = "click to unfold";
  t.addEventListener("click", () => t.classList.toggle("open"));
  return el("td", null, t);
}
function verdict(ok) {
  return ok === true ? el("span", "ok", "accepts") : ok === false ? el("span", "bad", "rejects") : el("span", "muted", "—");
}
function labelCell(label) {
  if (!label) return el("td", "muted", "—");
  const cls = label.label === "valid" ? "ok" : label.label === "invalid" ? "bad" : "warn";
  const td = el("td", null, el("span", cls, label.label), el("div", "muted", label.by));
  td.title = label.reason || "";
  return td;
}
function truncCell(truncated) {
  return el("td", truncated ? "warn" : "muted", truncated ? "truncated" : truncated === false ? "" : "?");
}

function trainTable(rows) {
  const table = el("table", null, el("tr", null, el("th", "narrow", "#"), el("th", "answer", "answer"), el("th", "narrow", "judge"),
    el("th", "narrow", "pairs"), el("th", null, "oracle"), el("th", "narrow", "label"), el("th", "narrow", "")));
  for (const r of rows) {
    const side = [r.chosen ? `chosen ×${r.chosen}` : null, r.rejected ? `rejected ×${r.rejected}` : null].filter(Boolean).join(", ");
    const oracle = el("td", null, verdict(r.oracle));
    if (r.oracle_reason) oracle.append(el("div", "muted", r.oracle_reason));
    const judge = el("td", "num", fmt(r.score));
    if (r.error) judge.append(el("div", "muted", r.error));
    const tr = el("tr", r.flagged ? "flagged" : null, el("td", "num", r.i + (r.source === "labelled" ? " (authored)" : "")),
      answerCell(r), judge, el("td", side ? null : "muted", side || "—"), oracle, labelCell(r.label), truncCell(r.truncated));
    table.append(tr);
  }
  return table;
}

function auditTable(rows) {
  const table = el("table", null, el("tr", null, el("th", "narrow", "answer id"), el("th", "answer", "answer"),
    el("th", "narrow", "judge s(a)"), el("th", null, "oracle"), el("th", "narrow", "label"),
    el("th", "narrow", "log π_t/π_0"), el("th", "narrow", "probe Δℓ/token"), el("th", "narrow", "")));
  for (const r of rows) {
    const oracle = el("td", null, verdict(r.oracle));
    const parts = Object.entries(r.accepts).filter(([k]) => k !== "oracle")
      .map(([k, v]) => `${k} ${v === true ? "✓" : v === false ? "✗" : "?"}`).join(", ");
    if (parts) oracle.append(el("div", "muted", parts));
    const label = r.label || (r.source === "stress" && r.verdict_label ? {label: r.verdict_label, by: "authored"} : null);
    const id = el("td", null, r.id, el("div", "muted", r.source + (r.reference ? ", r(e)" : "")));
    table.append(el("tr", r.flagged ? "flagged" : null, id, answerCell(r),
      el("td", "num", fmt(r.score), el("div", "muted", `r(e): ${fmt(r.ref_score)}`)), oracle, labelCell(label),
      el("td", "num", fmt(r.log_ratio), r.tokens ? el("div", "muted", `${r.tokens} tokens`) : null),
      el("td", "num", fmt(r.delta)), truncCell(r.truncated)));
  }
  return table;
}

// pairs and drops by (run, iteration, task), built once: a page looks them up per block
const keyOf = (x) => `${x.run}|${x.t}|${x.task}`;
const PAIRS = new Map(), DROPS = new Map();
for (const p of D.pairs) { if (!PAIRS.has(keyOf(p))) PAIRS.set(keyOf(p), []); PAIRS.get(keyOf(p)).push(p); }
for (const d of D.drops) DROPS.set(keyOf(d), d);

function pairsLine(run, t, task) {
  const ps = PAIRS.get(keyOf({run, t, task})) || [];
  const drop = DROPS.get(keyOf({run, t, task}));
  if (!ps.length) return el("div", "pairs", drop ? `no pair: ${drop.why}` : "no pair");
  const shown = ps.slice(0, 12).map((p) => `#${p.chosen} ≻ #${p.rejected} (margin ${fmt(p.margin)})`).join("; ");
  return el("div", "pairs", `pairs: ${shown}${ps.length > 12 ? `; … ${ps.length - 12} more` : ""}`);
}

// -- an environment --------------------------------------------------------------------------------
function anchor(task) {
  const e = D.envs[task];
  if (!e) return null;
  const box = el("div", "box", el("h5", null, "question"), el("pre", null, e.question), el("h5", null, "packet"));
  for (const [id, text] of e.evidence) box.append(el("pre", null, `[${id}] ${text}`));
  box.append(el("h5", null, "reference answer r(e)"), el("pre", null, e.reference));
  for (const [name, key] of [["certificate (hidden anchor)", "certificate"], ["evaluation spec", "spec"], ["ground truth", "ground_truth"]])
    if (e[key]) box.append(el("h5", null, name), el("pre", null, e[key]));
  return el("details", "anchor", el("summary", null, "question, packet and certificate"), box);
}
function envHeader(task) {
  const e = D.envs[task] || {};
  return el("h2", null, task, el("span", `badge ${e.kind || ""}`, e.kind || "?"), el("span", "badge", e.category || ""),
    el("span", "badge", `${e.split || "?"} split`));
}
const byT = (rows) => { const m = new Map(); for (const r of rows) { if (!m.has(r.t)) m.set(r.t, []); m.get(r.t).push(r); } return [...m.entries()].sort((a, b) => a[0] - b[0]); };
const byRun = (rows) => { const m = new Map(); for (const r of rows) { if (!m.has(r.run)) m.set(r.run, []); m.get(r.run).push(r); } return [...m.entries()].sort((a, b) => a[0] - b[0]); };

function trainBlock(run, t, rows) {
  const what = {labelled: "the authored answers", mixed: `answers of π_${t - 1} and the authored answers`}[D.runs[run].candidates]
    || `answers of π_${t - 1}`;
  return [el("h4", null, `iteration ${t}: ${what}, judged, paired`), trainTable(rows), pairsLine(run, t, rows[0].task)];
}
function auditBlock(t, rows) {
  return [el("h4", null, `checkpoint t = ${t}: the audit's answers`), auditTable(rows)];
}

function renderEnv(task, rows) {
  const sec = el("section", "env", envHeader(task), anchor(task));
  for (const [run, rr] of byRun(rows)) {
    sec.append(el("h3", null, runName(run)));
    if (state.view === "compare") {
      const tr = byT(rr.filter((r) => r.kindOf === "train")), au = byT(rr.filter((r) => r.kindOf === "audit"));
      for (const [groups, block, what] of [[tr, (g) => trainBlock(run, g[0], g[1]), "training"], [au, (g) => auditBlock(g[0], g[1]), "audit"]]) {
        if (!groups.length) continue;
        const first = groups[0], last = groups[groups.length - 1];
        const cols = el("div", "cols", el("div", null, ...block(first)),
          el("div", null, ...(last === first ? [el("div", "empty", `only one ${what} iteration`)] : block(last))));
        sec.append(cols);
      }
    } else {
      for (const [t, tr] of byT(rr)) sec.append(...(state.view === "train" ? trainBlock(run, t, tr) : auditBlock(t, tr)));
    }
  }
  return sec;
}

function render() {
  let rows;
  if (state.view === "train") rows = rowsOf(D.train);
  else if (state.view === "audit") rows = rowsOf(D.audit);
  else rows = rowsOf(D.train).map((r) => Object.assign({kindOf: "train"}, r))
      .concat(rowsOf(D.audit.filter((r) => r.source === "policy")).map((r) => Object.assign({kindOf: "audit"}, r)));
  const envs = new Map();
  for (const r of rows) { if (!envs.has(r.task)) envs.set(r.task, []); envs.get(r.task).push(r); }
  const tasks = [...envs.keys()].sort();
  const pages = Math.max(1, Math.ceil(tasks.length / PAGE_SIZE));
  state.page = Math.min(Math.max(0, state.page), pages - 1);
  const shown = tasks.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE);
  const main = $("envs");
  main.replaceChildren();
  if (!shown.length) main.append(el("div", "empty", "no answer matches these filters"));
  for (const task of shown) main.append(renderEnv(task, envs.get(task)));
  const prev = el("button", null, "‹ previous"), next = el("button", null, "next ›");
  prev.disabled = state.page === 0; next.disabled = state.page >= pages - 1;
  prev.addEventListener("click", () => { state.page--; update(); });
  next.addEventListener("click", () => { state.page++; update(); });
  $("pager").replaceChildren(prev, el("span", null, `page ${state.page + 1} of ${pages} · ${tasks.length} environments · ${rows.length} answers`), next);
}
function update() { writeHash(); render(); window.scrollTo(0, 0); }

function init() {
  readHash();
  options($("reward"), [...new Set(D.runs.map((r) => r.reward))].sort());
  options($("seed"), [...new Set(D.runs.map((r) => String(r.seed)))].sort());
  for (const k of ["view", "reward", "seed", "kind"]) {
    $(k).value = state[k];
    $(k).addEventListener("change", () => { state[k] = $(k).value; state.page = 0; update(); });
  }
  $("flagged").checked = state.flagged;
  $("flagged").addEventListener("change", () => { state.flagged = $("flagged").checked; state.page = 0; update(); });
  $("search").value = state.q;
  $("search").addEventListener("input", () => { state.q = $("search").value; state.page = 0; update(); });
  const flagged = D.train.filter((r) => r.flagged).length + D.audit.filter((r) => r.flagged).length;
  $("summary").textContent = `${D.root} · ${D.runs.length} run(s): ${D.runs.map((r, i) => runName(i) + " t=" + r.iterations.join(",")).join("; ")}` +
    ` · ${D.train.length} training answers, ${D.audit.length} audit answers (${D.answers_files.join(", ") || "no audit_answers.jsonl"})` +
    ` · ${flagged} judged above what the oracle accepts · oracle on training answers: ${D.training_oracle} · written ${D.made}`;
  render();
}
init();
</script>
</body>
</html>
"""
