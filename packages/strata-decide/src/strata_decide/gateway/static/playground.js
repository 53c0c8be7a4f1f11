// Strata decision playground. Talks to the gateway that serves it: POST /v1/systemone (with
// Strata's x_strata extensions: trace, rotations, parity) and the server's own routes forwarded
// under /upstream/. No build step, no dependencies.
"use strict";

const KEY_STORE = "strata-playground-api-key"; // sessionStorage only: gone when the tab closes
const TRACE_FIELDS = ["x_trace", "x_parity"]; // the playground's extras, left out of the hash

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- HTTP

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The message a refusal carries, in whichever documented shape it came. */
function errorMessage(body, text) {
  if (body && body.detail !== undefined) {
    if (Array.isArray(body.detail)) {
      // 422: {"detail": [{"type", "loc", "msg", "input"}]}
      return body.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("\n");
    }
    if (body.detail && typeof body.detail.message === "string") return body.detail.message;
  }
  if (body && body.error && typeof body.error.message === "string") return body.error.message; // server
  return text || "(empty reply)";
}

async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const key = sessionStorage.getItem(KEY_STORE);
  if (key) headers.Authorization = `Bearer ${key}`;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    throw new ApiError(0, `The gateway could not be reached (${error.message}).`);
  }
  const text = await response.text();
  let parsed = null;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = null;
  }
  if (!response.ok) throw new ApiError(response.status, errorMessage(parsed, text));
  return parsed;
}

// ---------------------------------------------------------------- hashing

/** Canonical JSON (RFC 8785): keys sorted by UTF-16 code units, ECMAScript number text. */
function canonical(value) {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
}

/** What the hash covers: the reply's model and answers, without the playground's extras. */
function hashedValues(reply) {
  const answers = {};
  for (const [id, answer] of Object.entries(reply.answers)) {
    const kept = {};
    for (const [key, value] of Object.entries(answer)) {
      if (!TRACE_FIELDS.includes(key)) kept[key] = value;
    }
    answers[id] = kept;
  }
  return { model: reply.model, answers };
}

const SHA_K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

/** SHA-256 in plain JS, for pages served over plain http to another host (no crypto.subtle). */
function sha256Plain(bytes) {
  const length = bytes.length;
  const padded = new Uint8Array(Math.ceil((length + 9) / 64) * 64);
  padded.set(bytes);
  padded[length] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor((length * 8) / 2 ** 32));
  view.setUint32(padded.length - 4, (length * 8) >>> 0);
  const h = new Uint32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const w = new Uint32Array(64);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));
  for (let block = 0; block < padded.length; block += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(block + i * 4);
    for (let i = 16; i < 64; i++) {
      const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, k] = h;
    for (let i = 0; i < 64; i++) {
      const t1 = (k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + SHA_K[i] + w[i]) >>> 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
      [k, g, f, e, d, c, b, a] = [g, f, e, (d + t1) >>> 0, c, b, a, (t1 + t2) >>> 0];
    }
    [a, b, c, d, e, f, g, k].forEach((value, i) => {
      h[i] = (h[i] + value) >>> 0;
    });
  }
  return Array.from(h, (x) => x.toString(16).padStart(8, "0")).join("");
}

async function sha256Hex(text) {
  const bytes = new TextEncoder().encode(text);
  if (globalThis.crypto && crypto.subtle) {
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
    return Array.from(digest, (x) => x.toString(16).padStart(2, "0")).join("");
  }
  return sha256Plain(bytes);
}

const replyHash = (reply) => sha256Hex(canonical(hashedValues(reply)));

// ---------------------------------------------------------------- small DOM helpers

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

const fixed = (x, digits = 4) => (x === null || x === undefined ? "n/a" : Number(x).toFixed(digits));
const percent = (p) => `${(100 * p).toFixed(1)}%`;

function showError(box, error) {
  box.replaceChildren(
    el("strong", { text: error.status ? `The server refused (HTTP ${error.status}):` : "Error:" }),
    el("span", { class: "error-message", text: error.message }),
  );
  box.hidden = false;
}

/** Bars, one per option; data-probability holds the value exactly as the API returned it. */
function renderBars(list, rows) {
  const top = Math.max(...rows.map((r) => r.p));
  list.replaceChildren(
    ...rows.map((row) => {
      const fill = el("span", { class: "bar-fill" });
      fill.style.width = `${Math.max(0, Math.min(1, row.p)) * 100}%`;
      const item = el(
        "li",
        { class: row.p === top ? "bar-row best" : "bar-row", "data-option": row.name, "data-probability": String(row.p) },
        el("span", { class: "bar-label", text: row.label ?? row.name }),
        el("span", { class: "bar-track", role: "presentation" }, fill),
        el("span", { class: "bar-value", text: percent(row.p) }),
      );
      item.setAttribute("aria-label", `${row.label ?? row.name}: ${percent(row.p)}`);
      return item;
    }),
  );
}

// ---------------------------------------------------------------- the decision form

const HINTS = {
  choice: "One option per line: a name, or name: description. Each option is read through a one-token label (A, B, ...).",
  text: "One option per line: a name, or name: description. The model answers with the name; each name is scored whole.",
  score: "One level per line, lowest first (2 to 10 levels).",
  noul: "Optional lines yes: what yes means, no: what no means.",
};

function stateValue() {
  const system = $("system").value;
  const user = $("user").value;
  if (!system.trim()) return user;
  return [
    { role: "system", content: system },
    { role: "user", content: user },
  ];
}

function chatMessages() {
  const messages = [];
  if ($("system").value.trim()) messages.push({ role: "system", content: $("system").value });
  messages.push({ role: "user", content: $("user").value });
  return messages;
}

function questionValue() {
  const kind = $("qtype").value;
  const instructions = $("instructions").value.trim() || null;
  const lines = $("options").value.split("\n").map((line) => line.trim()).filter(Boolean);
  if (kind === "score") return { type: "score", instructions, criteria: lines };
  if (kind === "noul") {
    const criteria = {};
    for (const line of lines) {
      const match = /^(yes|no)\s*:\s*(.*)$/i.exec(line);
      if (match) criteria[match[1].toLowerCase() === "yes" ? "true" : "false"] = match[2] || null;
    }
    return Object.keys(criteria).length ? { type: "noul", instructions, criteria } : { type: "noul", instructions };
  }
  const criteria = {};
  for (const line of lines) {
    const colon = line.indexOf(":");
    if (colon < 0) criteria[line] = null;
    else criteria[line.slice(0, colon).trim()] = line.slice(colon + 1).trim() || null;
  }
  const question = { type: "choice", instructions, criteria };
  if (kind === "text") question.x_answers = "text";
  return question;
}

function decisionBody(extensions) {
  return { model: "jev-latest", state: stateValue(), questions: { q: questionValue() }, ...extensions };
}

/** Every option with its probability as the reply gives it (yes/no: P(yes) and 1 - P(yes)). */
function optionRows(answer) {
  if (answer.type === "noul") {
    return [
      { name: "yes", p: answer.noul },
      { name: "no", p: 1 - answer.noul, label: "no (1 - P(yes))" },
    ];
  }
  return Object.entries(answer.probabilities).map(([name, p]) => ({
    name,
    p,
    label: answer.type === "score" ? `${name}: ${textOf(answer.legend[name])}` : name,
  }));
}

const textOf = (value) => (typeof value === "string" ? value : JSON.stringify(value));

function answerText(answer) {
  if (answer.type === "noul") return `${answer.noul >= 0.5 ? "yes" : "no"} (P(yes) = ${fixed(answer.noul)})`;
  if (answer.type === "score") return `${fixed(answer.score, 3)} (expected level)`;
  return answer.choice;
}

function renderPrompt(prompt) {
  const text = prompt.text;
  const cached = text.startsWith(prompt.cached_text) ? prompt.cached_text.length : 0;
  const shared = text.startsWith(prompt.shared_prefix_text) ? prompt.shared_prefix_text.length : 0;
  const cuts = [...new Set([0, cached, shared, text.length])].sort((a, b) => a - b);
  const pieces = [];
  for (let i = 0; i + 1 < cuts.length; i++) {
    const [start, end] = [cuts[i], cuts[i + 1]];
    let node = document.createTextNode(text.slice(start, end));
    if (start < shared) node = el("span", { class: "in-state" }, node);
    if (start < cached) node = el("mark", {}, node);
    pieces.push(node);
  }
  $("prompt-text").replaceChildren(...pieces);
  $("prompt-stats").textContent =
    `${prompt.tokens} tokens; ${prompt.cached_tokens} read from the prefix cache ` +
    `(the server's usage.prompt_tokens_details.cached_tokens); the state's system message is ` +
    `the first ${prompt.shared_prefix_tokens}.`;
}

async function renderCandidates(trace) {
  const box = $("candidates");
  if (!trace.candidates) {
    box.hidden = true;
    return;
  }
  const scores = await call("POST", "/upstream/v1/score_candidates", {
    prompt: trace.prompt.token_ids,
    candidates: trace.candidates,
  });
  const tables = scores.candidates.map((candidate, index) => {
    const option = trace.options[index];
    const rows = candidate.tokens.map((token, i) =>
      el("tr", {}, el("td", { class: "token", text: JSON.stringify(token) }), el("td", { class: "num", text: fixed(candidate.token_logprobs[i]) })),
    );
    return el(
      "div",
      { class: "scroll candidate", "data-option": option },
      el(
        "table",
        {},
        el("caption", { text: option }),
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Token" }), el("th", { scope: "col", text: "Log-probability" }))),
        el("tbody", {}, ...rows),
        el(
          "tfoot",
          {},
          el("tr", {}, el("th", { scope: "row", text: "Total" }), el("td", { class: "num", text: fixed(candidate.logprob) })),
          el("tr", {}, el("th", { scope: "row", text: "Normalised" }), el("td", { class: "num", text: fixed(candidate.normalized_logprob) })),
          el("tr", {}, el("th", { scope: "row", text: "Probability" }), el("td", { class: "num", text: fixed(candidate.probability) })),
        ),
      ),
    );
  });
  $("candidate-tables").replaceChildren(...tables);
  box.hidden = false;
}

let serverInfo = "";
let last = null; // {body, reply, hash}

async function loadServerInfo() {
  try {
    const health = await call("GET", "/upstream/health");
    serverInfo = `model ${health.model}; kernels ${textOf(health.kernels)}; invariant ${textOf(health.invariant)}`;
  } catch (error) {
    serverInfo = `server info unavailable: ${error.message}`;
  }
}

function renderFingerprint(reply) {
  if (reply.x_system_fingerprint) {
    $("fingerprint-label").textContent = "system_fingerprint";
    $("fingerprint").textContent = reply.x_system_fingerprint;
  } else {
    $("fingerprint-label").textContent = "Server (no system_fingerprint in its replies)";
    $("fingerprint").textContent = serverInfo;
  }
}

function renderDecision(reply, hash) {
  const answer = reply.answers.q;
  $("answer").textContent = answerText(answer);
  $("confidence").textContent = "confidence" in answer ? fixed(answer.confidence) : "n/a (yes/no answers have none)";
  $("label-mass").textContent = Number(answer.x_label_mass).toPrecision(4);
  $("model").textContent = reply.model;
  renderBars($("bars"), optionRows(answer));
  renderPrompt(answer.x_trace.prompt);
  renderFingerprint(reply);
  $("hash-first").textContent = hash;
  $("repeat-row").hidden = true;
  $("rotation").hidden = true;
  $("parity-result").hidden = true;
  $("result").hidden = false;
}

async function busy(statusText, work) {
  const buttons = document.querySelectorAll("#decision-form button");
  $("decision-error").hidden = true;
  $("decision-status").textContent = statusText;
  buttons.forEach((b) => (b.disabled = true));
  try {
    await work();
    $("decision-status").textContent = "Done.";
  } catch (error) {
    $("decision-status").textContent = "";
    showError($("decision-error"), error);
  } finally {
    buttons.forEach((b) => (b.disabled = false));
  }
}

async function decide() {
  const body = decisionBody({ x_strata: { trace: true } });
  $("request-json").textContent = JSON.stringify(body, null, 2);
  let reply;
  try {
    reply = await call("POST", "/v1/systemone", body);
  } catch (error) {
    $("result").hidden = true; // no answer of an earlier request beside this refusal
    throw error;
  }
  const hash = await replyHash(reply);
  last = { body, reply, hash };
  if (!serverInfo) await loadServerInfo();
  renderDecision(reply, hash);
  const trace = reply.answers.q.x_trace;
  trace.options = Object.keys(body.questions.q.criteria || {});
  await renderCandidates(trace);
}

async function repeat() {
  if (!last) await decide();
  const reply = await call("POST", "/v1/systemone", last.body);
  const hash = await replyHash(reply);
  $("hash-first").textContent = last.hash;
  $("hash-repeat").textContent = hash;
  const same = hash === last.hash;
  $("hash-verdict").textContent = same ? "equal" : "differ";
  $("hash-verdict").className = same ? "verdict-ok" : "verdict-bad";
  $("repeat-row").hidden = false;
}

async function rotations() {
  if (!last) await decide();
  const reply = await call("POST", "/v1/systemone", { ...last.body, x_strata: { trace: true, rotations: true } });
  const plain = optionRows(last.reply.answers.q);
  const averaged = optionRows(reply.answers.q);
  const reads = reply.answers.q.x_trace.reads;
  const head = el("tr", {}, ...["Option", "Caller's order", `Average of ${reads} orders`].map((t) => el("th", { scope: "col", text: t })));
  const rows = plain.map((row, i) =>
    el("tr", {}, el("th", { scope: "row", text: row.label ?? row.name }), el("td", { class: "num", text: fixed(row.p) }), el("td", { class: "num", text: fixed(averaged[i].p) })),
  );
  const caption = el("caption", { text: `Answer averaged over every rotation of the options: ${answerText(reply.answers.q)}` });
  $("rotation-table").replaceChildren(caption, el("thead", {}, head), el("tbody", {}, ...rows));
  $("rotation").hidden = false;
}

async function parity() {
  if (!last) await decide();
  const reply = await call("POST", "/v1/systemone", { ...last.body, x_strata: { parity: true } });
  const result = reply.answers.q.x_parity;
  if (result === null) {
    $("parity-text").textContent = "Word answers are scored whole; they have no one-token labels to compare.";
  } else {
    const passed = result.compared > 0 && result.max_abs_diff === 0 && result.argmax_agrees === true;
    $("parity-text").textContent =
      `${result.compared} of ${result.labels} labels were in the server's own top-${result.top_k}; ` +
      `largest difference ${result.max_abs_diff ?? "n/a"}; argmax ` +
      `${result.argmax_agrees === null ? "not judged" : result.argmax_agrees ? "agrees" : "differs"}. ` +
      (passed ? "Parity holds." : "Parity does not hold exactly.");
  }
  $("parity-result").hidden = false;
}

// ---------------------------------------------------------------- structured output

async function structured() {
  let schema;
  try {
    schema = JSON.parse($("schema").value);
  } catch (error) {
    throw new ApiError(0, `The schema is not valid JSON: ${error.message}`);
  }
  const messages = chatMessages();
  const chat = await call("POST", "/upstream/v1/chat/completions", {
    messages,
    response_format: { type: "json_schema", json_schema: { name: "answer", schema } },
    temperature: 0,
    max_tokens: Number($("max-tokens").value) || 64,
    logprobs: true,
    top_logprobs: 3,
  });
  const choice = chat.choices[0];
  $("structured-answer").textContent = choice.message.content;
  $("structured-fingerprint").textContent = chat.system_fingerprint || `none in the reply (${serverInfo})`;
  const entries = (choice.logprobs && choice.logprobs.content) || [];
  const head = el("tr", {}, ...["Token", "Log-probability", "Alternatives"].map((t) => el("th", { scope: "col", text: t })));
  const rows = entries.map((entry) =>
    el(
      "tr",
      {},
      el("td", { class: "token", text: JSON.stringify(entry.token) }),
      el("td", { class: "num", text: fixed(entry.logprob) }),
      el("td", { class: "token", text: entry.top_logprobs.map((t) => `${JSON.stringify(t.token)} ${fixed(t.logprob, 3)}`).join("  ") }),
    ),
  );
  $("structured-tokens").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  $("structured-result").hidden = false;

  const prompt = await call("POST", "/upstream/tokenize", { messages, add_generation_prompt: true });
  try {
    const set = await call("POST", "/upstream/v1/score_candidates", { prompt: prompt.tokens, json_schema: schema });
    $("answer-set-note").textContent = `${set.candidates.length} answers, each scored whole after the same prompt (/v1/score_candidates with json_schema).`;
    const chosen = canonical(parsedOrNull(choice.message.content));
    renderBars(
      $("answer-set"),
      set.candidates.map((c) => ({
        name: c.text,
        p: c.probability,
        label: canonical(c.value) === chosen ? `\u2605 ${c.text}` : c.text,
      })),
    );
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 400) throw error;
    $("answer-set-note").textContent = `This schema has no finite answer set: ${error.message}`;
    $("answer-set").replaceChildren();
  }
}

function parsedOrNull(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

async function structuredBusy() {
  const button = $("run-structured");
  $("structured-error").hidden = true;
  $("structured-status").textContent = "Answering...";
  button.disabled = true;
  try {
    if (!serverInfo) await loadServerInfo();
    await structured();
    $("structured-status").textContent = "Done.";
  } catch (error) {
    $("structured-status").textContent = "";
    showError($("structured-error"), error);
  } finally {
    button.disabled = false;
  }
}

// ---------------------------------------------------------------- tabs, key, wiring

function selectTab(tab) {
  for (const other of document.querySelectorAll('[role="tab"]')) {
    const selected = other === tab;
    other.setAttribute("aria-selected", String(selected));
    other.tabIndex = selected ? 0 : -1;
    $(other.getAttribute("aria-controls")).hidden = !selected;
  }
  tab.focus();
}

function tabKeys(event) {
  const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
  const index = tabs.indexOf(event.currentTarget);
  const moves = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: tabs.length - 1 };
  if (!(event.key in moves)) return;
  event.preventDefault();
  selectTab(tabs[(moves[event.key] + tabs.length) % tabs.length]);
}

function showKeyStatus() {
  $("key-status").textContent = sessionStorage.getItem(KEY_STORE)
    ? "A key is set for this tab (session storage; it is gone when the tab closes)."
    : "No key set: requests go without one.";
}

function updateHint() {
  $("options-hint").textContent = HINTS[$("qtype").value];
}

function start() {
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) sessionStorage.setItem(KEY_STORE, key);
    $("api-key").value = "";
    serverInfo = "";
    showKeyStatus();
  });
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORE);
    serverInfo = "";
    showKeyStatus();
  });
  $("decision-form").addEventListener("submit", (event) => {
    event.preventDefault();
    busy("Deciding...", decide);
  });
  $("repeat").addEventListener("click", () => busy("Repeating the request...", repeat));
  $("rotations").addEventListener("click", () => busy("Reading every order of the options...", rotations));
  $("parity").addEventListener("click", () => busy("Comparing with the server's top-20...", parity));
  $("structured-form").addEventListener("submit", (event) => {
    event.preventDefault();
    structuredBusy();
  });
  $("qtype").addEventListener("change", updateHint);
  for (const tab of document.querySelectorAll('[role="tab"]')) {
    tab.addEventListener("click", () => selectTab(tab));
    tab.addEventListener("keydown", tabKeys);
  }
  updateHint();
  showKeyStatus();
  document.body.dataset.ready = "true";
}

// for the browser tests: the hash pieces, checked against an independent implementation
window.strataPlayground = { canonical, hashedValues, sha256Plain, sha256Hex };

start();
