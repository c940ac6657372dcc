// The estimator page (book/estimator.md): `inferbook estimate`, run in the reader's browser.
//
// Nothing is estimated in JavaScript. Pyodide (served from this site, _static/estimator/pyodide)
// runs the library's own wheel, the one `make book` builds, and the page asks its module
// `inferbook.cli.estimate_page` for what the command line prints: the rows of --json, the
// table, the warnings, the one-line refusal of bad input, and the latency-throughput figure.
// The inputs live in the URL query (model, chip, chips, layout, batch, context, prompt,
// weights, kv), so an estimate can be linked; the form writes them there and reads them back
// (the browser's back button included). No request leaves the site.

const ROOT = document.getElementById("estimator");
const ASSETS = new URL("estimator/", import.meta.url);
const LANG = (document.documentElement.lang || "en").toLowerCase().startsWith("zh") ? "zh" : "en";
const KEYS = ["model", "chip", "chips", "layout", "batch", "context", "prompt", "weights", "kv"];
const PASTE = "\u0000paste", CUSTOM = "\u0000custom";

const WORDS = {
  en: {
    runtime: "Loading Python (Pyodide) into this page, from this site…",
    library: "Loading the inferbook library…",
    ready: (s) => `Ready in ${s} s: every estimate below is computed in your browser by the library's own inferbook estimate.`,
    computing: "Estimating…",
    failed: "The estimator could not start: ",
    model: "Model", paste: "paste a config.json…", pasteHint: "A Hugging Face config.json (paste it, or choose the file):",
    chip: "Chip", custom: "enter its figures…", customHint: "The chip's figures, as --hardware-config takes them (bytes, bytes/s, FLOP/s):",
    chips: "Chips", layout: "Layout", auto: "the faster one", batch: "Batch sizes", context: "Context (tokens)",
    contextHint: "the model's positions", prompt: "Prompt (tokens)", promptHint: "the context",
    weights: "Weights", kv: "KV cache", byDefault: "the command's default", run: "Estimate", command: "The same on the command line:",
    json: "show JSON (the rows of --json)", warnings: "Warnings:", link: "Link to this estimate",
  },
  zh: {
    runtime: "正在把 Python（Pyodide）从本站载入这个页面……",
    library: "正在载入 inferbook 库……",
    ready: (s) => `已就绪，用时 ${s} 秒：下面的每个估算都由库自己的 inferbook estimate 在你的浏览器里算出。`,
    computing: "正在估算……",
    failed: "估算器无法启动：",
    model: "模型", paste: "粘贴一个 config.json……", pasteHint: "一个 Hugging Face 的 config.json（粘贴进来，或选择文件）：",
    chip: "芯片", custom: "输入它的参数……", customHint: "芯片的参数，格式与 --hardware-config 相同（字节、字节/秒、FLOP/s）：",
    chips: "芯片数", layout: "布局", auto: "较快的那个", batch: "批量大小", context: "上下文（词元）",
    contextHint: "模型的位置数", prompt: "提示词（词元）", promptHint: "上下文长度",
    weights: "权重", kv: "KV 缓存", byDefault: "命令的默认值", run: "估算", command: "在命令行上的等价命令：",
    json: "显示 JSON（--json 的各行）", warnings: "警告：", link: "本估算的链接",
  },
}[LANG];

let python = null;       // the Pyodide instance, once loaded
let choices = null;      // what the form offers (estimator_page.form_choices)
const form = {};         // the form's controls, by query key (and a few more)

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
}

function status(text, state) {
  document.getElementById("estimate-status").textContent = text;
  if (state) ROOT.dataset.state = state;
  document.getElementById("estimate-progress").hidden = ROOT.dataset.state !== "loading";
}

// The query's keys: the form's, then the command's other flags (weight-bytes, strict, ...),
// which a link may carry and the form keeps as they are.
const allKeys = () => [...KEYS, ...choices.other_flags];

function queryFromURL() {
  const params = new URLSearchParams(location.search);
  const query = {};
  // A key given twice counts once, its last value: as a flag given twice on a command line.
  for (const key of allKeys()) if (params.has(key)) query[key] = params.getAll(key).pop();
  return Object.keys(query).length ? query : { ...choices.default_query };
}

function linkOf(query) {
  // Commas and spaces stay readable in the link; everything else is escaped.
  const parts = allKeys().filter((k) => query[k] !== undefined && query[k] !== "")
    .map((k) => `${k}=${encodeURIComponent(query[k]).replace(/%2C/g, ",").replace(/%20/g, "+")}`);
  return `${location.pathname}?${parts.join("&")}`;
}

// JSON's tokens: a string (escapes included), a punctuation mark, or a run of anything else
// (numbers, true, false, null, and whatever is not JSON at all).
const TOKENS = /"(?:[^"\\]|\\.)*"?|[{}\[\],:]|[^\s{}\[\],:"]+/g;

function compact(text) {
  // A pasted JSON object goes into the link without the whitespace between its tokens. The
  // tokens themselves stay as they were typed (4096.0 is not 4096 to the command), and text
  // that is not JSON stays as it is, for the command to report.
  try { JSON.parse(text); } catch { return text; }
  return text.match(TOKENS).join("");
}

function pretty(text) {
  // One key per line, the tokens untouched (as in `compact`).
  try { JSON.parse(text); } catch { return text; }
  let depth = 0, out = "";
  for (const token of text.match(TOKENS)) {
    if (token === "}" || token === "]") out += "\n" + " ".repeat(--depth) + token;
    else if (token === "{" || token === "[") out += token + "\n" + " ".repeat(++depth);
    else if (token === ",") out += ",\n" + " ".repeat(depth);
    else if (token === ":") out += ": ";
    else out += token;
  }
  return out.replace(/([{\[])\n\s*([}\]])/g, "$1$2");
}

function option(select, value, label) {
  select.append(el("option", { value, text: label ?? value }));
}

function ensureOption(select, value) {
  // A value from a link that the lists lack (a misspelt preset) is offered as it is: the
  // command, not the page, says what is wrong with it.
  if (![...select.options].some((o) => o.value === value)) option(select, value);
}

function field(label, control, hint) {
  return el("label", { class: "estimator-field" }, el("span", { text: label }), control,
    ...(hint ? [el("small", { text: hint })] : []));
}

function buildForm() {
  form.model = el("select", { id: "estimator-model", name: "model" });
  for (const m of choices.models) option(form.model, m.name);
  option(form.model, PASTE, WORDS.paste);
  form.config = el("textarea", { id: "estimator-config", rows: "8", spellcheck: "false" });
  form.file = el("input", { type: "file", accept: ".json,application/json" });
  form.file.addEventListener("change", async () => {
    if (form.file.files.length) form.config.value = await form.file.files[0].text();
  });
  form.configBox = el("div", { class: "estimator-paste" }, el("small", { text: WORDS.pasteHint }),
    form.file, form.config);

  form.chip = el("select", { id: "estimator-chip", name: "chip" });
  for (const c of choices.chips) option(form.chip, c.name);
  option(form.chip, CUSTOM, WORDS.custom);
  form.figures = el("textarea", { id: "estimator-figures", rows: "6", spellcheck: "false" });
  form.figuresBox = el("div", { class: "estimator-paste" }, el("small", { text: WORDS.customHint }),
    form.figures);

  form.layout = el("select", { id: "estimator-layout", name: "layout" });
  option(form.layout, "", WORDS.auto);
  for (const l of choices.layouts) option(form.layout, l);
  form.kv = el("select", { id: "estimator-kv", name: "kv" });
  option(form.kv, "", WORDS.byDefault);
  for (const k of choices.kv) option(form.kv, k);
  form.weights = el("input", { id: "estimator-weights", name: "weights", list: "estimator-formats" });
  const formats = el("datalist", { id: "estimator-formats" });
  for (const w of choices.weights) option(formats, w);
  for (const key of ["chips", "batch", "context", "prompt"]) {
    form[key] = el("input", { id: `estimator-${key}`, name: key, spellcheck: "false" });
  }
  form.weights.placeholder = WORDS.byDefault;
  form.context.placeholder = WORDS.contextHint;
  form.prompt.placeholder = WORDS.promptHint;

  const button = el("button", { type: "submit", id: "estimator-run", text: WORDS.run });
  const element = el("form", { id: "estimator-form", class: "estimator-form" },
    field(WORDS.model, form.model), form.configBox, field(WORDS.chip, form.chip), form.figuresBox,
    el("div", { class: "estimator-row" }, field(WORDS.chips, form.chips),
      field(WORDS.layout, form.layout), field(WORDS.batch, form.batch)),
    el("div", { class: "estimator-row" }, field(WORDS.context, form.context),
      field(WORDS.prompt, form.prompt), field(WORDS.weights, form.weights), formats,
      field(WORDS.kv, form.kv)),
    button);
  form.model.addEventListener("change", showPasteBoxes);
  form.chip.addEventListener("change", () => {
    // A chip of one's own starts from the figures of the chip chosen before it.
    if (form.chip.value === CUSTOM && !form.figures.value.trim()) {
      const start = choices.chip_figures[form.chip.dataset.previous] ??
        choices.chip_figures[choices.chips[0].name];
      form.figures.value = JSON.stringify({ ...start, name: "custom" }, null, 1);
    }
    if (form.chip.value !== CUSTOM) form.chip.dataset.previous = form.chip.value;
    showPasteBoxes();
  });
  element.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = queryFromForm();
    history.pushState(null, "", linkOf(query));
    estimate(query);
  });
  ROOT.insertBefore(element, document.getElementById("estimate-output"));
}

function showPasteBoxes() {
  form.configBox.hidden = form.model.value !== PASTE;
  form.figuresBox.hidden = form.chip.value !== CUSTOM;
}

function fillForm(query) {
  const model = query.model ?? "";
  if (model.trimStart().startsWith("{")) {
    form.model.value = PASTE; form.config.value = pretty(model);
  } else { ensureOption(form.model, model); form.model.value = model; }
  const chip = query.chip ?? "";
  if (chip.trimStart().startsWith("{")) {
    form.chip.value = CUSTOM; form.figures.value = pretty(chip);
  } else { ensureOption(form.chip, chip); form.chip.value = chip; form.chip.dataset.previous = chip; }
  for (const key of ["layout", "kv"]) {
    const value = query[key] ?? "";
    ensureOption(form[key], value); form[key].value = value;
  }
  for (const key of ["chips", "batch", "context", "prompt", "weights"]) form[key].value = query[key] ?? "";
  showPasteBoxes();
}

function queryFromForm() {
  const query = {}, current = queryFromURL();
  for (const key of choices.other_flags) if (key in current) query[key] = current[key];
  query.model = form.model.value === PASTE ? compact(form.config.value) : form.model.value;
  query.chip = form.chip.value === CUSTOM ? compact(form.figures.value) : form.chip.value;
  for (const key of ["chips", "layout", "batch", "context", "prompt", "weights", "kv"]) {
    const value = form[key].value.trim();
    if (value !== "") query[key] = value;
  }
  return query;
}

function callPython(code, values) {
  const names = python.toPy(values);
  try { return python.runPython(code, { globals: names }); } finally { names.destroy(); }
}

function render(result) {
  const out = (id) => document.getElementById(id);
  out("estimate-command").textContent = `$ ${result.command}`;
  out("estimate-error").textContent = result.error ?? "";
  out("estimate-error").hidden = result.error === null;
  const ok = result.error === null;
  out("estimate-results").hidden = !ok;
  out("estimate-json").textContent = ok ? result.json : "";
  out("estimate-table").textContent = ok ? result.table : "";
  out("estimate-figure").innerHTML = ok ? result.svg : "";
  const warnings = out("estimate-warnings");
  warnings.replaceChildren(...(ok ? result.warnings : []).map((w) => el("li", { text: w })));
  out("estimate-warnings-box").hidden = !ok || result.warnings.length === 0;
  out("estimate-link").href = location.href;
}

function estimate(query) {
  status(WORDS.computing);
  ROOT.dataset.busy = "1";
  // Let the note paint before Python takes the thread.
  return new Promise((resolve) => setTimeout(() => {
    let result;
    try {
      result = JSON.parse(callPython(
        "import json\nfrom inferbook.cli.estimate_page import estimate_page\n" +
        "json.dumps(estimate_page(json.loads(query), lang))", { query: JSON.stringify(query), lang: LANG }));
    } catch (err) {
      // A bug, not bad input (the command answers bad input in one line): show its last line.
      const lines = String(err.message || err).trim().split("\n");
      result = { command: "", error: lines[lines.length - 1] };
    }
    render(result);
    if (ROOT.dataset.readyText) status(ROOT.dataset.readyText);
    ROOT.dataset.runs = String(Number(ROOT.dataset.runs || 0) + 1);
    delete ROOT.dataset.busy;
    resolve();
  }, 0));
}

// When each stage of loading ended (ms after the script started), for whoever measures it.
const stages = {};

async function boot() {
  const started = performance.now();
  try {
    status(WORDS.runtime, "loading");
    const manifest = await (await fetch(new URL("manifest.json", ASSETS))).json();
    const { loadPyodide } = await import(new URL(`pyodide/pyodide.mjs`, ASSETS).href);
    const [runtime, wheel] = await Promise.all([
      loadPyodide({ indexURL: new URL("pyodide/", ASSETS).href }),
      fetch(new URL(manifest.wheel, ASSETS)).then((r) => {
        if (!r.ok) throw new Error(`${manifest.wheel}: HTTP ${r.status}`);
        return r.arrayBuffer();
      }),
    ]);
    python = runtime;
    stages.runtime = performance.now() - started;
    status(WORDS.library);
    python.unpackArchive(wheel, "wheel");
    choices = JSON.parse(python.runPython(
      "import json\nfrom inferbook.cli.estimate_page import form_choices\njson.dumps(form_choices())"));
    stages.library = performance.now() - started;
  } catch (err) {
    status(WORDS.failed + String(err.message || err).split("\n").pop(), "failed");
    return;
  }
  buildForm();
  fillForm(queryFromURL());
  stages.form = performance.now() - started;
  await estimate(queryFromURL());
  // Ready: the first estimate is on the page.
  stages.ready = performance.now() - started;
  ROOT.dataset.stages = JSON.stringify(stages);
  ROOT.dataset.readyMs = String(Math.round(stages.ready));
  ROOT.dataset.readyText = WORDS.ready((stages.ready / 1000).toFixed(1));
  status(ROOT.dataset.readyText, "ready");
  window.addEventListener("popstate", () => { const q = queryFromURL(); fillForm(q); estimate(q); });
  // A link to another estimate on this page (the examples) estimates here, without a reload.
  document.addEventListener("click", (event) => {
    const a = event.target.closest && event.target.closest("a[href]");
    if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || url.pathname !== location.pathname || !url.search || url.hash) return;
    event.preventDefault();
    history.pushState(null, "", url.pathname + url.search);
    const q = queryFromURL(); fillForm(q); estimate(q);
  });
}

document.getElementById("estimate-link").textContent = WORDS.link;
document.getElementById("estimate-json-summary").textContent = WORDS.json;
document.getElementById("estimate-command-label").textContent = WORDS.command;
document.getElementById("estimate-warnings-label").textContent = WORDS.warnings;
boot();
