// glm.c's chat page. Talks only to the server that served it: /v1/chat/completions (streamed,
// SSE), /v1/models and /stats. Model text never becomes markup: every node is built with
// createElement and textContent (never parsed as markup), so '<script>' in an answer is text.
'use strict';

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

// ---- storage: conversations, settings, key, theme (localStorage) ----------------------------
const store = {
  get(key, fallback) {
    try { const v = localStorage.getItem('glm.' + key); return v === null ? fallback : JSON.parse(v); }
    catch { return fallback; }
  },
  set(key, value) {
    try { localStorage.setItem('glm.' + key, JSON.stringify(value)); } catch { /* full or off */ }
  },
};

const DEFAULTS = { system: '', temperature: 0.7, maxTokens: null, thinking: true, effort: '' };
let settings = Object.assign({}, DEFAULTS, store.get('settings', {}));
let apiKey = store.get('key', '');
let conversations = store.get('conversations', []);
let current = store.get('current', null);
let modelName = 'glm';
let busy = null;                    // the generation in progress: { controller, conv, msg }

const saveConversations = () => { store.set('conversations', conversations); store.set('current', current); };
const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
const conv = () => conversations.find((c) => c.id === current) || null;
const titleOf = (text) => text.trim().split('\n')[0].slice(0, 48);

// ---- the API -------------------------------------------------------------------------------
class KeyNeeded extends Error {}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  if (apiKey) h.Authorization = 'Bearer ' + apiKey;
  return h;
}

async function api(path, options = {}) {
  const res = await fetch(path, Object.assign({ headers: headers(!!options.body) }, options));
  if (res.status === 401) throw new KeyNeeded();
  return res;
}

async function errorText(res) {
  try { const j = await res.json(); if (j && j.error && j.error.message) return j.error.message; } catch { /* not JSON */ }
  return 'HTTP ' + res.status;
}

// The key dialog: resolves once a key is entered (true) or cancelled (false).
let keyWaiters = [];
function askKey(refused) {
  return new Promise((resolve) => {
    keyWaiters.push(resolve);
    const d = $('key-dialog');
    $('key-error').hidden = !refused;
    if (!d.open) { $('key-input').value = ''; d.showModal(); $('key-input').focus(); }
  });
}
function keyAnswered(ok) {
  const waiters = keyWaiters;
  keyWaiters = [];
  waiters.forEach((w) => w(ok));
}

// fetch with the key, asking for it (again) on 401
async function withKey(fn) {
  for (let refused = false; ; refused = true) {
    try { return await fn(); } catch (e) {
      if (!(e instanceof KeyNeeded)) throw e;
      if (!(await askKey(refused && !!apiKey))) throw new Error('an API key is needed');
    }
  }
}

// ---- Markdown, rendered safely: text nodes only -----------------------------------------------
// Spans are bounded (a lone '*' must not make every later one scan to the end of the text).
const INLINE = new RegExp([
  '(`+)([^`]|[^`][\\s\\S]{0,2000}?[^`])\\1(?!`)',          // 1,2 code
  '\\*\\*(?=\\S)([\\s\\S]{0,400}?\\S)\\*\\*',               // 3 strong
  '(?<=^|[\\s(])__(?=\\S)([\\s\\S]{0,400}?\\S)__(?!\\w)',   // 4 strong (not inside words: snake__case)
  '\\*(?=[^\\s*])([\\s\\S]{0,400}?[^\\s*])\\*',            // 5 em
  '(?<=^|[\\s(])_(?=[^\\s_])([\\s\\S]{0,400}?[^\\s_])_(?!\\w)',   // 6 em
  '~~(?=\\S)([\\s\\S]{0,400}?\\S)~~',                      // 7 del
  '(!?)\\[([^\\]\\n]*)\\]\\(([^()\\s]+)\\)',          // 8,9,10 link or image
  '(https?://[^\\s<>()]*[^\\s<>().,;:!?\'"])',        // 11 bare link
].join('|'), 'g');

function safeUrl(url) { return /^https?:\/\//i.test(url) ? url : null; }

function link(parent, text, url) {
  const href = safeUrl(url);
  if (!href) { parent.append(text); return; }
  const a = el('a', null, text);
  a.href = href;
  a.target = '_blank';
  a.rel = 'noopener noreferrer nofollow';
  parent.append(a);
}

function inline(parent, text) {
  let at = 0;
  for (const m of text.matchAll(INLINE)) {   // matchAll works on a copy: inline() recurses
    if (m.index > at) parent.append(text.slice(at, m.index));
    if (m[1]) parent.append(el('code', null, m[2]));
    else if (m[3] !== undefined || m[4] !== undefined) { const b = el('strong'); inline(b, m[3] ?? m[4]); parent.append(b); }
    else if (m[5] !== undefined || m[6] !== undefined) { const i = el('em'); inline(i, m[5] ?? m[6]); parent.append(i); }
    else if (m[7] !== undefined) { const d = el('del'); inline(d, m[7]); parent.append(d); }
    else if (m[9] !== undefined) {
      // an image is never loaded (it would be a request to another host): its link is shown
      if (m[8]) link(parent, '[image: ' + (m[9] || m[10]) + ']', m[10]);
      else link(parent, m[9] || m[10], m[10]);
    } else if (m[11]) link(parent, m[11], m[11]);
    at = m.index + m[0].length;
  }
  if (at < text.length) parent.append(text.slice(at));
}

function codeBlock(parent, lang, code) {
  const wrap = el('div', 'code');
  const bar = el('div', 'code-bar');
  bar.append(el('span', null, lang || 'text'));
  const copy = el('button', 'copy', 'Copy');
  copy.type = 'button';
  copy.addEventListener('click', () => copyText(code, copy));
  bar.append(copy);
  const pre = el('pre');
  pre.append(el('code', null, code));
  wrap.append(bar, pre);
  parent.append(wrap);
}

const LIST_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;

function markdown(parent, text) {
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; ) {
    const line = lines[i];
    let m;
    if ((m = /^\s{0,3}(`{3,}|~{3,})\s*([^`\s]*)/.exec(line))) {          // fenced code
      const fence = m[1], body = [];
      for (i++; i < lines.length && !lines[i].trimStart().startsWith(fence); i++) body.push(lines[i]);
      i++;
      codeBlock(parent, m[2], body.join('\n'));
    } else if ((m = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line))) {     // heading
      const h = el('h' + Math.min(6, m[1].length + 2));
      inline(h, m[2]);
      parent.append(h);
      i++;
    } else if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {              // rule
      parent.append(el('hr'));
      i++;
    } else if (/^\s{0,3}>/.test(line)) {                                 // quote
      const body = [];
      for (; i < lines.length && /^\s{0,3}>/.test(lines[i]); i++) body.push(lines[i].replace(/^\s{0,3}> ?/, ''));
      const q = el('blockquote');
      markdown(q, body.join('\n'));
      parent.append(q);
    } else if ((m = LIST_ITEM.exec(line))) {                             // list
      const ordered = /\d/.test(m[2]);
      const list = el(ordered ? 'ol' : 'ul');
      if (ordered && parseInt(m[2], 10) !== 1) list.start = parseInt(m[2], 10);
      while (i < lines.length && (m = LIST_ITEM.exec(lines[i])) && /\d/.test(m[2]) === ordered) {
        const body = [m[3]];
        for (i++; i < lines.length && /^\s{2,}\S/.test(lines[i]) && !LIST_ITEM.exec(lines[i]); i++) body.push(lines[i].trim());
        const li = el('li');
        inline(li, body.join('\n'));
        list.append(li);
      }
      parent.append(list);
    } else if (!line.trim()) {
      i++;
    } else {                                                             // paragraph
      const body = [];
      for (; i < lines.length && lines[i].trim() && !/^\s{0,3}(`{3,}|~{3,}|#{1,6}\s|>)/.test(lines[i]) &&
             !(body.length && LIST_ITEM.test(lines[i])); i++) body.push(lines[i]);
      const p = el('p');
      inline(p, body.join('\n'));
      parent.append(p);
    }
  }
}

function copyText(text, button) {
  const done = () => { const t = button.textContent; button.textContent = 'Copied'; setTimeout(() => { button.textContent = t; }, 1200); };
  if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, () => {});
  else {
    const ta = el('textarea');
    ta.value = text;
    document.body.append(ta);
    ta.select();
    try { document.execCommand('copy'); done(); } catch { /* no clipboard */ }
    ta.remove();
  }
}

// ---- the conversation view ------------------------------------------------------------------
function fmtSeconds(s) { return s < 1 ? Math.round(s * 1000) + ' ms' : s.toFixed(s < 10 ? 2 : 1) + ' s'; }
function fmtBytes(b) {
  if (!(b >= 0)) return '-';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  for (; b >= 1000 && i < u.length - 1; i++) b /= 1000;
  return (i ? b.toFixed(b < 10 ? 2 : b < 100 ? 1 : 0) : b) + ' ' + u[i];
}

function messageMeta(msg) {
  const s = msg.stats;
  if (!s) return msg.stopped ? 'stopped' : '';
  const parts = [];
  if (s.tokens !== undefined) parts.push(s.tokens + ' tokens');
  if (s.tps) parts.push(s.tps.toFixed(1) + ' tok/s');
  if (s.ttft !== undefined && s.ttft !== null) parts.push('first token ' + fmtSeconds(s.ttft));
  if (s.hit !== undefined && s.hit !== null) parts.push('expert hit ' + (100 * s.hit).toFixed(0) + '%');
  if (s.finish) parts.push(s.finish === 'length' ? 'cut at max tokens' : s.finish);
  if (msg.stopped) parts.push('stopped');
  return parts.join(' \u00b7 ');
}

function renderMessage(c, index) {
  const msg = c.messages[index];
  const node = el('article', 'msg ' + msg.role);
  node.dataset.index = index;
  const body = el('div', 'body');
  if (msg.role === 'assistant') {
    if (msg.reasoning) {
      const d = el('details', 'reasoning');
      d.open = !!msg.streaming && !msg.content;
      const summary = el('summary', null, msg.streaming && !msg.content ? 'Thinking\u2026' : 'Reasoning');
      d.append(summary, el('div', 'reasoning-text', msg.reasoning));
      body.append(d);
    }
    const content = el('div', 'content');
    if (msg.raw) content.append(el('pre', 'raw', msg.content));
    else markdown(content, msg.content);
    if (msg.streaming && !msg.content && !msg.reasoning) content.append(el('span', 'dots', '\u2026'));
    body.append(content);
    if (msg.error) body.append(el('div', 'error', msg.error));
  } else {
    body.append(el('div', 'content user-text', msg.content));
  }
  node.append(body);
  const foot = el('div', 'foot');
  const meta = el('span', 'meta muted', msg.role === 'assistant' ? messageMeta(msg) : '');
  foot.append(meta);
  const actions = el('span', 'actions');
  const action = (label, fn, title) => {
    const b = el('button', 'ghost', label);
    b.type = 'button';
    if (title) b.title = title;
    b.addEventListener('click', fn);
    actions.append(b);
  };
  if (!msg.streaming) {
    if (msg.role === 'assistant') {
      action('Copy', (e) => copyText(msg.content, e.currentTarget));
      action(msg.raw ? 'Rendered' : 'Raw', () => { msg.raw = !msg.raw; saveConversations(); renderConversation(); },
             'Show the answer as the exact text the model wrote');
      if (index === c.messages.length - 1) action('Regenerate', () => regenerate());
    } else {
      action('Edit', () => editMessage(node, index));
    }
  }
  foot.append(actions);
  node.append(foot);
  return node;
}

function renderConversation() {
  const c = conv();
  const box = $('messages');
  box.replaceChildren();
  $('chat-title').textContent = c ? c.title : 'New chat';
  $('empty').hidden = !!(c && c.messages.length);
  if (c) c.messages.forEach((_, i) => box.append(renderMessage(c, i)));
  box.scrollTop = box.scrollHeight;
  renderList();
}

// One message again (while it streams): cheaper than the whole conversation.
let pendingFrame = 0;
function rerenderLast() {
  if (pendingFrame) return;
  pendingFrame = requestAnimationFrame(() => {
    pendingFrame = 0;
    const c = conv();
    if (!c || !busy || busy.conv !== c) return;
    const box = $('messages');
    const index = c.messages.length - 1;
    const old = box.lastElementChild;
    const stick = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    const node = renderMessage(c, index);
    if (old && old.dataset.index === String(index)) old.replaceWith(node);
    else box.append(node);
    if (stick) box.scrollTop = box.scrollHeight;
  });
}

function renderList() {
  const nav = $('conversations');
  nav.replaceChildren();
  [...conversations].sort((a, b) => b.updated - a.updated).forEach((c) => {
    const item = el('div', 'conv' + (c.id === current ? ' active' : ''));
    const title = el('button', 'conv-title', c.title);
    title.type = 'button';
    title.addEventListener('click', () => { current = c.id; saveConversations(); renderConversation(); closeSideOnNarrow(); });
    const del = el('button', 'conv-del ghost', '\u00d7');
    del.type = 'button';
    del.title = 'Delete this conversation';
    del.setAttribute('aria-label', 'Delete ' + c.title);
    del.addEventListener('click', () => {
      if (busy && busy.conv === c) stop();
      conversations = conversations.filter((x) => x !== c);
      if (current === c.id) current = null;
      saveConversations();
      renderConversation();
    });
    item.append(title, del);
    nav.append(item);
  });
}

function editMessage(node, index) {
  if (busy) return;
  const c = conv();
  const body = node.querySelector('.body');
  const ta = el('textarea', 'edit');
  ta.value = c.messages[index].content;
  const row = el('div', 'edit-actions');
  const save = el('button', 'primary', 'Save and send');
  const cancel = el('button', null, 'Cancel');
  save.type = cancel.type = 'button';
  row.append(cancel, save);
  body.replaceChildren(ta, row);
  node.querySelector('.foot').hidden = true;
  ta.focus();
  const submit = () => {
    const text = ta.value;
    if (!text.trim()) return;
    c.messages = c.messages.slice(0, index);
    c.messages.push({ role: 'user', content: text });
    if (index === 0) c.title = titleOf(text);
    c.updated = Date.now();
    saveConversations();
    renderConversation();
    generate(c);
  };
  save.addEventListener('click', submit);
  cancel.addEventListener('click', () => renderConversation());
  ta.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); }
    if (e.key === 'Escape') renderConversation();
  });
}

// ---- sending and streaming ------------------------------------------------------------------
function requestBody(c) {
  const messages = [];
  if (settings.system.trim()) messages.push({ role: 'system', content: settings.system });
  for (const m of c.messages) if (!m.error || m.content) messages.push({ role: m.role, content: m.content });
  const body = {
    model: modelName,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number(settings.temperature),
    chat_template_kwargs: { enable_thinking: !!settings.thinking },
  };
  if (settings.maxTokens) body.max_tokens = Number(settings.maxTokens);
  if (settings.thinking && settings.effort) body.reasoning_effort = settings.effort;
  return body;
}

// SSE: "data: JSON" events separated by blank lines; "data: [DONE]" ends the stream.
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '', data = [];
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, '');
      buffer = buffer.slice(nl + 1);
      if (line === '') {
        if (data.length) { const d = data.join('\n'); data = []; if (d === '[DONE]') return; onEvent(JSON.parse(d)); }
      } else if (line.startsWith('data:')) data.push(line.slice(line[5] === ' ' ? 6 : 5));
    }
    if (done) return;
  }
}

async function generate(c) {
  const msg = { role: 'assistant', content: '', reasoning: '', streaming: true };
  const body = requestBody(c);
  c.messages.push(msg);
  const controller = new AbortController();
  busy = { controller, conv: c, msg };
  setBusy(true);
  rerenderLast();
  const t0 = performance.now();
  let tFirst = null, finish = null, usage = null;
  try {
    const res = await withKey(() => api('/v1/chat/completions', { method: 'POST', body: JSON.stringify(body), signal: controller.signal }));
    if (!res.ok) throw new Error(await errorText(res));
    await readEvents(res, (ev) => {
      if (ev.error) throw new Error(ev.error.message || 'the server stopped the answer');
      if (ev.usage) usage = ev.usage;
      const choice = ev.choices && ev.choices[0];
      if (!choice) return;
      const d = choice.delta || {};
      if (d.reasoning_content) msg.reasoning += d.reasoning_content;
      if (d.content) msg.content += d.content;
      if (d.tool_calls) for (const t of d.tool_calls) msg.content += '\n[tool call ' + (t.function && t.function.name) + ']';
      if ((d.reasoning_content || d.content) && tFirst === null) tFirst = performance.now();
      if (choice.finish_reason) finish = choice.finish_reason;
      rerenderLast();
    });
  } catch (e) {
    if (controller.signal.aborted) msg.stopped = true;
    else msg.error = e.message || String(e);
  }
  msg.streaming = false;
  const tokens = usage ? usage.completion_tokens : undefined;
  msg.stats = { tokens, finish, ttft: tFirst === null ? null : (tFirst - t0) / 1000 };
  if (tokens > 1 && tFirst !== null) msg.stats.tps = (tokens - 1) / ((performance.now() - tFirst) / 1000);
  busy = null;
  c.updated = Date.now();
  saveConversations();
  setBusy(false);
  if (conv() === c) renderConversation();
  // the server's figures for this answer (time to first token, rate, expert hits) when it was the last
  try {
    const s = await pollStats();
    if (s && !msg.stopped && !msg.error && s.request.generated_tokens === tokens) {
      const r = s.request;
      msg.stats.ttft = r.time_to_first_token_seconds;
      if (r.decode_tokens_per_second) msg.stats.tps = r.decode_tokens_per_second;
      msg.stats.hit = s.request_experts.hit_rate;
      saveConversations();
      if (conv() === c) renderConversation();
    }
  } catch { /* figures are a bonus */ }
}

function send() {
  const input = $('input');
  const text = input.value;
  if (!text.trim() || busy) return;
  let c = conv();
  if (!c) {
    c = { id: newId(), title: titleOf(text), created: Date.now(), updated: Date.now(), messages: [] };
    conversations.push(c);
    current = c.id;
  }
  c.messages.push({ role: 'user', content: text });
  c.updated = Date.now();
  input.value = '';
  autosize();
  saveConversations();
  renderConversation();
  generate(c);
}

function regenerate() {
  const c = conv();
  if (!c || busy || !c.messages.length || c.messages[c.messages.length - 1].role !== 'assistant') return;
  c.messages.pop();
  renderConversation();
  generate(c);
}

// Stop: aborting the fetch closes the connection; the server notices and stops generating.
function stop() { if (busy) busy.controller.abort(); }

function setBusy(on) {
  $('send').hidden = on;
  $('stop').hidden = !on;
  schedulePoll(on ? 500 : 0);
}

function autosize() {
  const t = $('input');
  t.style.height = 'auto';
  t.style.height = Math.min(t.scrollHeight, 240) + 'px';
}

// ---- the engine panel: GET /stats ------------------------------------------------------------
let pollTimer = 0, lastStats = null, statsKeyBlocked = false;

async function pollStats() {
  if (statsKeyBlocked && !apiKey) return null;
  try {
    const res = await api('/stats', { cache: 'no-store' });
    if (!res.ok) throw new Error(await errorText(res));
    const s = await res.json();
    lastStats = s;
    statsKeyBlocked = false;
    $('stats-error').hidden = true;
    renderStats(s);
    return s;
  } catch (e) {
    if (e instanceof KeyNeeded) statsKeyBlocked = true;
    else { $('stats-error').textContent = 'No figures: ' + (e.message || e); $('stats-error').hidden = false; }
    return null;
  }
}

function schedulePoll(delay) {
  clearTimeout(pollTimer);
  pollTimer = setTimeout(async () => {
    if (!document.hidden && !$('engine').hidden) await pollStats();
    const active = busy || (lastStats && lastStats.request.phase !== 'idle');
    schedulePoll(active ? 700 : 4000);
  }, delay);
}

function figure(dl, name, value, title) {
  const dt = el('dt', null, name), dd = el('dd', null, value);
  if (title) dt.title = dd.title = title;
  dl.append(dt, dd);
}

function renderStats(s) {
  const r = s.request, x = s.experts;
  $('phase').textContent = r.phase;
  $('phase').className = 'pill ' + r.phase;
  const p = r.prefill;
  $('prefill').hidden = r.phase !== 'prefill';
  if (r.phase === 'prefill') {
    $('prefill-bar').style.width = (100 * p.fraction).toFixed(1) + '%';
    $('prefill-text').textContent = 'prefill ' + Math.round(p.fraction * p.tokens) + ' of ' + p.tokens + ' tokens' +
      (p.layers ? ' \u00b7 layer ' + Math.min(p.layer + 1, p.layers) + '/' + p.layers : '');
  }
  const f = $('figures');
  f.replaceChildren();
  const num = (v, d) => (v === null || v === undefined ? '-' : v.toFixed(d));
  figure(f, 'Decode', num(r.decode_tokens_per_second, 1) + ' tok/s', 'tokens after the first, per second, in the ' + (r.phase === 'idle' ? 'last' : 'current') + ' answer');
  figure(f, 'First token', r.time_to_first_token_seconds === null ? '-' : fmtSeconds(r.time_to_first_token_seconds), 'from the request to its first token (prefill)');
  figure(f, 'Prefill', num(r.prefill_tokens_per_second, 0) + ' tok/s', r.prefill.tokens + ' prompt tokens run, ' + r.reused_tokens + ' reused from the cache');
  figure(f, 'Tokens', r.prompt_tokens + ' in \u00b7 ' + r.generated_tokens + ' out');
  const hit = (h) => (h === null || h === undefined ? '-' : (100 * h).toFixed(1) + '%');
  figure(f, 'Expert hits', hit(s.request_experts.hit_rate) + ' now \u00b7 ' + hit(x.hit_rate) + ' all', x.hits + ' hits, ' + x.misses + ' misses since the start');
  figure(f, 'Disk read', fmtBytes(x.bytes_read) + (x.read_seconds > 0 ? ' \u00b7 ' + fmtBytes(x.bytes_read / x.read_seconds) + '/s' : ''), 'expert bytes read from disk since the start (' + x.io_mode + ')');
  figure(f, 'Context', s.context_used + ' / ' + s.context + ' tokens');
  figure(f, 'Answers', s.totals.requests + ' \u00b7 ' + s.totals.generated_tokens + ' tokens');
  renderRam(s.ram);
  renderMap(x);
}

const RAM_PARTS = [
  ['dense_bytes', 'dense weights', 'c1'], ['kv_cache_and_scratch_bytes', 'KV cache + scratch', 'c2'],
  ['overhead_bytes', 'overhead', 'c3'], ['page_cache_reserve_bytes', 'page-cache reserve', 'c4'],
  ['expert_cache_bytes', 'expert cache', 'c5'], ['unused_bytes', 'unused', 'c6'],
];
function renderRam(ram) {
  const bar = $('ram-bar'), legend = $('ram-legend');
  bar.replaceChildren();
  legend.replaceChildren();
  for (const [key, name, cls] of RAM_PARTS) {
    const v = Math.max(0, ram[key]);
    const part = el('div', 'part ' + cls);
    part.style.width = (100 * v / ram.budget_bytes).toFixed(2) + '%';
    part.title = name + ': ' + fmtBytes(v);
    bar.append(part);
    const dt = el('dt');
    dt.append(el('i', 'swatch ' + cls), name);
    legend.append(dt, el('dd', null, fmtBytes(v)));
  }
  const dt = el('dt', null, 'budget');
  dt.title = 'from ' + ram.budget_from;
  legend.append(dt, el('dd', null, fmtBytes(ram.budget_bytes)));
  legend.append(el('dt', null, 'resident now'), el('dd', null, fmtBytes(ram.rss_bytes)));
  if (ram.moe_layers) legend.append(el('dt', null, 'expert slots'), el('dd', null, ram.slots_per_layer + ' / ' + ram.experts_per_layer + ' per layer'));
}

let mapLayout = null;
function renderMap(x) {
  const canvas = $('expert-map');
  const layers = x.layers, E = x.experts_per_layer;
  if (!layers.length) { canvas.hidden = true; $('map-note').textContent = 'This model has no routed experts.'; return; }
  canvas.hidden = false;
  const width = canvas.clientWidth || 300;
  const cell = Math.max(1, Math.min(24, Math.floor(width / E)));
  const rowH = Math.max(2, Math.min(14, cell));
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(cell * E * dpr);
  canvas.height = Math.round(rowH * layers.length * dpr);
  canvas.style.height = rowH * layers.length + 'px';
  canvas.style.width = cell * E + 'px';
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  const css = getComputedStyle(document.documentElement);
  const hot = css.getPropertyValue('--accent').trim() || '#3b82f6';
  const cold = css.getPropertyValue('--map-cold').trim() || '#888';
  const ram = css.getPropertyValue('--map-ram').trim() || '#f59e0b';
  g.clearRect(0, 0, cell * E, rowH * layers.length);
  layers.forEach((L, row) => {
    const max = Math.max(1, ...L.routed);
    const cached = new Set(L.cached);
    for (let e = 0; e < E; e++) {
      const n = L.routed[e];
      const y = row * rowH, xx = e * cell;
      g.globalAlpha = n ? 0.18 + 0.82 * Math.log1p(n) / Math.log1p(max) : 0.08;
      g.fillStyle = n ? hot : cold;
      g.fillRect(xx, y, Math.max(1, cell - (cell > 3 ? 1 : 0)), Math.max(1, rowH - (rowH > 3 ? 1 : 0)));
      if (cached.has(e)) {
        g.globalAlpha = 1;
        g.fillStyle = ram;
        const h = Math.max(1, Math.round(rowH / 4));
        g.fillRect(xx, y + rowH - h - (rowH > 3 ? 1 : 0), Math.max(1, cell - (cell > 3 ? 1 : 0)), h);
      }
    }
  });
  g.globalAlpha = 1;
  mapLayout = { cell, rowH, layers, E };
  const cachedTotal = layers.reduce((a, L) => a + L.cached.length, 0);
  $('map-note').textContent = layers.length + ' layers \u00d7 ' + E + ' experts; ' + cachedTotal +
    ' in RAM (bottom stripe); brighter: chosen more often.';
}

function mapHover(e) {
  if (!mapLayout) return;
  const rect = $('expert-map').getBoundingClientRect();
  const col = Math.floor((e.clientX - rect.left) / mapLayout.cell), row = Math.floor((e.clientY - rect.top) / mapLayout.rowH);
  const L = mapLayout.layers[row];
  if (!L || col < 0 || col >= mapLayout.E) { $('map-hover').textContent = ''; return; }
  $('map-hover').textContent = 'layer ' + L.layer + ', expert ' + col + ': chosen ' + L.routed[col] + ' times' +
    (L.cached.includes(col) ? ', in RAM' : ', on disk');
}

// ---- settings, theme, layout ----------------------------------------------------------------
function openSettings() {
  $('set-system').value = settings.system;
  $('set-temperature').value = settings.temperature;
  $('set-max-tokens').value = settings.maxTokens || '';
  $('set-thinking').checked = !!settings.thinking;
  $('set-effort').value = settings.effort;
  $('settings').showModal();
}

function saveSettings() {
  const t = parseFloat($('set-temperature').value);
  const n = parseInt($('set-max-tokens').value, 10);
  settings = {
    system: $('set-system').value,
    temperature: Number.isFinite(t) && t >= 0 ? t : DEFAULTS.temperature,
    maxTokens: Number.isFinite(n) && n > 0 ? n : null,
    thinking: $('set-thinking').checked,
    effort: $('set-effort').value,
  };
  store.set('settings', settings);
}

const THEMES = ['auto', 'light', 'dark'];
function applyTheme(theme) {
  if (theme === 'auto') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
  $('theme').textContent = 'Theme: ' + theme;
  store.set('theme', theme);
  if (lastStats) renderMap(lastStats.experts);
}

const narrow = () => window.matchMedia('(max-width: 760px)').matches;
function closeSideOnNarrow() { if (narrow()) document.body.classList.remove('side-open'); }

async function loadModel() {
  try {
    const res = await withKey(() => api('/v1/models'));
    if (!res.ok) return;
    const j = await res.json();
    if (j.data && j.data[0]) {
      modelName = j.data[0].id;
      $('model-name').textContent = modelName + ' \u00b7 ' + j.data[0].max_model_len + ' tokens';
    }
  } catch { /* shown again on the first message */ }
}

function init() {
  applyTheme(store.get('theme', 'auto'));
  if (current && !conv()) current = null;
  // on a narrow screen the panel covers the chat: shown when asked for
  $('engine').hidden = store.get('engine-hidden', window.matchMedia('(max-width: 1100px)').matches);
  renderConversation();
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $('input').addEventListener('input', autosize);
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && busy && !document.querySelector('dialog[open]')) stop(); });
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', () => { current = null; saveConversations(); renderConversation(); closeSideOnNarrow(); $('input').focus(); });
  $('open-settings').addEventListener('click', openSettings);
  $('settings-cancel').addEventListener('click', () => $('settings').close());
  $('settings-form').addEventListener('submit', () => saveSettings());
  $('forget-key').addEventListener('click', () => { apiKey = ''; store.set('key', ''); $('settings').close(); });
  $('theme').addEventListener('click', () => {
    const now = store.get('theme', 'auto');
    applyTheme(THEMES[(THEMES.indexOf(now) + 1) % THEMES.length]);
  });
  $('toggle-side').addEventListener('click', () => document.body.classList.toggle('side-open'));
  $('toggle-engine').addEventListener('click', () => {
    $('engine').hidden = !$('engine').hidden;
    store.set('engine-hidden', $('engine').hidden);
    if (!$('engine').hidden) pollStats();
  });
  $('key-form').addEventListener('submit', () => {
    apiKey = $('key-input').value.trim();
    store.set('key', apiKey);
    statsKeyBlocked = false;
    keyAnswered(!!apiKey);
    loadModel();
  });
  $('key-cancel').addEventListener('click', () => { $('key-dialog').close(); keyAnswered(false); });
  $('key-dialog').addEventListener('cancel', () => keyAnswered(false));
  $('expert-map').addEventListener('mousemove', mapHover);
  $('expert-map').addEventListener('mouseleave', () => { $('map-hover').textContent = ''; });
  window.addEventListener('resize', () => { if (lastStats) renderMap(lastStats.experts); });
  window.addEventListener('storage', (e) => {   // another tab changed the conversations
    if (e.key === 'glm.conversations' && !busy) { conversations = store.get('conversations', []); renderConversation(); }
  });
  loadModel();
  schedulePoll(0);
  $('input').focus();
}

init();
