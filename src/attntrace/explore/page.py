"""The explore page: one HTML document, its style and script inline (nothing from a CDN, so it
works offline). The script reads the controls, asks the server for the engine's steps
(``/api/trace``) and draws them; it computes no shape itself. Every text from the server is set
with ``textContent``, never as markup.
"""

from __future__ import annotations

from html import escape

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 18px;
       color: #1b2a3a; }
h1 { font-size: 19px; margin: 0 0 8px; } h2 { font-size: 15px; margin: 16px 0 6px; }
#controls { display: flex; flex-wrap: wrap; gap: 10px 16px; align-items: end;
            padding: 10px; background: #f4f6fa; border-radius: 6px; }
#controls label { display: flex; flex-direction: column; font-size: 12px; color: #445; }
#controls input[type=number] { width: 78px; font: 14px ui-monospace, monospace; }
#controls label.flag { flex-direction: row; gap: 4px; align-items: center; }
#error { color: #b00020; min-height: 18px; font-size: 13px; margin: 6px 0; }
#flow { font: 13px ui-monospace, monospace; color: #334; overflow-wrap: anywhere; }
#steps { display: flex; flex-wrap: wrap; gap: 6px; }
.step { border: 1px solid #b9c3d6; border-radius: 5px; padding: 4px 8px; cursor: pointer;
        background: #fff; font: 12px ui-monospace, monospace; text-align: center; }
.step .shape { display: block; font-size: 13px; color: #103478; }
.step.changed { background: #fff4c2; border-color: #d9a400; }
.step.selected { outline: 2px solid #103478; }
#detail { margin-top: 12px; padding: 10px; border-left: 3px solid #103478; background: #f9fafc;
          min-height: 40px; }
#detail .explanation { font-size: 15px; margin: 6px 0; }
#detail table, #token-rows table { border-collapse: collapse;
          font: 12px ui-monospace, monospace; }
#detail td, #token-rows td, #token-rows th { padding: 1px 6px; text-align: right; }
.lang button.on { font-weight: bold; }
#tokens button { margin: 2px; font: 13px ui-monospace, monospace; }
#tokens button.on { background: #103478; color: #fff; }
.note { color: #667; font-size: 12px; }
"""

#: The page's own words (the step explanations come from attntrace.learn).
WORDS = {
    "en": {
        "title": "attntrace explore",
        "flow": "The flow of shapes",
        "steps": "Steps (click one)",
        "pick": "Click a step for what it does, its numbers and its cost.",
        "cost": "cost",
        "bytes": "bytes",
        "numbers": "numbers",
        "no_numbers": "no numbers at these sizes (shapes only); make them small to see them",
        "prompt": "The prompt (click a token)",
        "layer": "layer",
        "head": "head",
        "row": "its attention row in every head and layer",
    },
    "zh": {
        "title": "attntrace 探索",
        "flow": "形状的流动",
        "steps": "步骤（点击查看）",
        "pick": "点击一个步骤，查看它做什么、它的数值和计算量。",
        "cost": "计算量",
        "bytes": "字节",
        "numbers": "数值",
        "no_numbers": "这个尺寸下没有数值（只有形状）；把尺寸调小即可看到",
        "prompt": "提示词（点击一个词元）",
        "layer": "层",
        "head": "头",
        "row": "它在每一层、每个头里的注意力行",
    },
}

SCRIPT = r"""
const WORDS = __WORDS__;
const params = new URLSearchParams(location.search);
const TOKEN = params.get("token") || "";
let lang = (params.get("lang") || document.documentElement.lang) === "zh" ? "zh" : "en";
let last = null, shapes = {}, selected = null, timer = null;
const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function query() {
  const q = new URLSearchParams({token: TOKEN});
  for (const input of document.querySelectorAll("#controls [name]")) {
    q.set(input.name, input.type === "checkbox" ? (input.checked ? "1" : "0") : input.value);
  }
  return q;
}

async function ask(path, q) {
  const response = await fetch(path + "?" + q.toString());
  const text = await response.text();
  if (!response.ok) throw new Error(text.trim());
  return JSON.parse(text);
}

async function refresh() {
  try {
    const doc = await ask("/api/trace", query());
    $("error").textContent = "";
    draw(doc);
  } catch (error) {
    $("error").textContent = error.message;
  }
}

function draw(doc) {
  last = doc;
  $("flow").textContent = doc.flow;
  const box = $("steps");
  box.replaceChildren();
  const now = {};
  for (const step of doc.steps) {
    const shape = "(" + step.shape.join(", ") + ")";
    now[step.name] = shape;
    const card = el("div", undefined, "step");
    card.dataset.step = step.name;
    card.append(el("span", step.name), el("span", shape, "shape"));
    if (step.name in shapes && shapes[step.name] !== shape) card.classList.add("changed");
    if (step.name === selected) card.classList.add("selected");
    card.addEventListener("click", () => choose(step.name));
    box.append(card);
  }
  shapes = now;
  if (selected && !(selected in now)) selected = null;
  detail();
}

function choose(name) {
  selected = name;
  for (const card of document.querySelectorAll(".step")) {
    card.classList.toggle("selected", card.dataset.step === name);
  }
  detail();
}

function detail() {
  const box = $("detail");
  const w = WORDS[lang];
  const step = last && selected ? last.steps.find((s) => s.name === selected) : null;
  if (!step) { box.replaceChildren(el("p", w.pick, "note")); return; }
  const head = el("h2");
  head.append(el("span", step.name + "  "), el("code", step.op));
  const parts = [head, el("p", step.explanation[lang], "explanation")];
  parts.push(el("p", "(" + step.shape.join(", ") + ")  (" + step.axes.join(", ") + ")  " +
                step.dtype, "shape"));
  parts.push(el("p", w.cost + ": " + step.flops.toLocaleString("en") + " FLOPs" +
                (step.formula && step.formula !== "0" ? " = " + step.formula : "") +
                "; " + w.bytes + ": " + step.bytes.toLocaleString("en"), "cost"));
  if (step.values !== null && step.values !== undefined) {
    parts.push(el("h2", w.numbers), numbers(step.values));
  } else {
    parts.push(el("p", w.no_numbers, "note"));
  }
  box.replaceChildren(...parts);
}

function cell(v) {
  if (v === null) return "-inf";
  if (typeof v === "boolean") return v ? "1" : "0";
  return Number(v).toFixed(4);
}

function numbers(values) {
  const block = el("div", undefined, "numbers");
  const matrices = [];
  (function walk(v, where) {
    if (!Array.isArray(v) || !Array.isArray(v[0])) { matrices.push([where, [v]]); return; }
    if (!Array.isArray(v[0][0])) { matrices.push([where, v]); return; }
    v.forEach((inner, i) => walk(inner, where.concat([i])));
  })(Array.isArray(values) ? values : [values], []);
  for (const [where, rows] of matrices) {
    if (where.length) block.append(el("div", "[" + where.join(", ") + "]", "note"));
    const table = el("table");
    for (const row of rows) {
      const tr = el("tr");
      for (const v of (Array.isArray(row) ? row : [row])) tr.append(el("td", cell(v)));
      table.append(tr);
    }
    block.append(table);
  }
  return block;
}

function setLang(next) {
  lang = next;
  document.documentElement.lang = lang;
  for (const b of document.querySelectorAll(".lang button")) {
    b.classList.toggle("on", b.dataset.lang === lang);
  }
  for (const node of document.querySelectorAll("[data-word]")) {
    node.textContent = WORDS[lang][node.dataset.word];
  }
  detail();
}

function shade(v) {
  const t = Math.min(Math.max(v, 0), 1);
  const mix = (a) => Math.round(255 + (a - 255) * t);
  return "rgb(" + mix(16) + "," + mix(52) + "," + mix(120) + ")";
}

async function prompt() {
  const doc = await ask("/api/prompt", new URLSearchParams({token: TOKEN}));
  if (!doc.tokens.length) return;
  $("prompt").hidden = false;
  $("prompt-note").textContent = doc.note;
  doc.tokens.forEach((t, i) => {
    const b = el("button", t);
    b.dataset.index = i;
    b.addEventListener("click", () => rows(i));
    $("tokens").append(b);
  });
}

async function rows(index) {
  for (const b of document.querySelectorAll("#tokens button")) {
    b.classList.toggle("on", Number(b.dataset.index) === index);
  }
  const doc = await ask("/api/token", new URLSearchParams({token: TOKEN, index: String(index)}));
  const w = WORDS[lang];
  const box = $("token-rows");
  box.replaceChildren(el("p", doc.query + ": " + w.row, "note"));
  for (const layer of doc.layers) {
    const table = el("table");
    table.dataset.layer = layer.layer;
    const top = el("tr");
    top.append(el("th", w.layer + " " + layer.layer));
    for (const key of doc.keys) top.append(el("th", key));
    table.append(top);
    layer.heads.forEach((row, h) => {
      const tr = el("tr");
      tr.append(el("th", w.head + " " + h));
      for (const v of row) {
        const td = el("td", v === null ? "·" : v.toFixed(2));
        if (v !== null) { td.style.background = shade(v); td.style.color = v > .45 ? "#fff" : ""; }
        tr.append(td);
      }
      table.append(tr);
    });
    box.append(table);
  }
}

for (const input of document.querySelectorAll("#controls [name]")) {
  const given = params.get(input.name);
  if (given !== null) {
    if (input.type === "checkbox") input.checked = given === "1"; else input.value = given;
  }
  input.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(refresh, 150); });
}
for (const b of document.querySelectorAll(".lang button")) {
  b.addEventListener("click", () => setLang(b.dataset.lang));
}
setLang(lang);
refresh();
prompt().catch((error) => { $("error").textContent = error.message; });
"""


def _control(name: str, default: str, kind: str) -> str:
    """One control of the form, named as the query parameter it sets."""
    if kind == "flag":
        checked = " checked" if default == "1" else ""
        return f'<label class="flag"><input type="checkbox" name="{name}"{checked}>{name}</label>'
    if kind == "choice":
        from attntrace.config.attention_config import ALGORITHMS

        options = "".join(
            f"<option{' selected' if a == default else ''}>{a}</option>" for a in ALGORITHMS
        )
        return f'<label>{name}<select name="{name}">{options}</select></label>'
    placeholder = ' placeholder="none"' if kind.endswith("?") else ""
    least = 0 if kind == "count" else 1
    return (
        f'<label>{name}<input type="number" name="{name}" min="{least}" value="{default}"'
        f"{placeholder}></label>"
    )


def page(lang: str = "en") -> str:
    """The whole page.

    >>> html = page()
    >>> html.startswith("<!DOCTYPE html>") and 'name="h"' in html and "http" not in html
    True
    """
    import json

    from attntrace.explore.api import CONTROLS

    controls = "".join(_control(name, d, kind) for name, (_, kind, d) in CONTROLS.items())
    script = SCRIPT.replace("__WORDS__", json.dumps(WORDS, ensure_ascii=False))
    return f"""<!DOCTYPE html>
<html lang="{escape(lang)}">
<head>
<meta charset="utf-8">
<title>attntrace explore</title>
<style>{STYLE}</style>
</head>
<body>
<h1 data-word="title">attntrace explore</h1>
<div class="lang"><button data-lang="en" id="lang-en">English</button>
<button data-lang="zh" id="lang-zh">中文</button></div>
<form id="controls" onsubmit="return false">{controls}</form>
<div id="error" role="alert"></div>
<h2 data-word="flow"></h2>
<div id="flow"></div>
<h2 data-word="steps"></h2>
<div id="steps"></div>
<div id="detail"></div>
<section id="prompt" hidden>
<h2 data-word="prompt"></h2>
<p class="note" id="prompt-note"></p>
<div id="tokens"></div>
<div id="token-rows"></div>
</section>
<script>{script}</script>
</body>
</html>
"""
