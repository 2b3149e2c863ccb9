// The chat page in a real browser (Debian's chromium through puppeteer-core), against real glm
// servers. Run by tests/t_web.sh:
//   node web_test.mjs NPM_DIR CHROMIUM URL KEY_URL KEY SHOT_DIR
// URL: a server whose answers run to max_tokens (no EOS); KEY_URL: one with API_KEY=KEY.
// Prints PASS/FAIL lines. Every page fails the test if it asks any host but its server.
import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';

const [npmDir, chromium, url, keyUrl, key, shotDir] = process.argv.slice(2);
const puppeteer = createRequire(npmDir + '/node_modules/')('puppeteer-core');
const pass = (name, why = '') => console.log(`PASS ${name}${why ? ': ' + why : ''}`);
const fail = (name, why) => { console.log(`FAIL ${name}: ${why}`); process.exitCode = 1; };
const check = (name, ok, why) => (ok ? pass(name) : fail(name, why));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-extensions', '--disable-background-networking',
         '--disable-component-update', '--disable-default-apps', '--disable-sync'],
});

// A page that may only talk to `base`'s origin: other requests are aborted and reported. The
// bodies of chat requests and the Authorization headers are kept for the checks.
async function openPage(base, theme = 'light') {
  const page = await browser.newPage();
  await page.setViewport({ width: 1360, height: 860 });
  await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: theme }]);
  const origin = new URL(base).origin;
  const log = { foreign: [], chats: [], auth: [], errors: [], stub: null };
  await page.setRequestInterception(true);
  page.on('request', (req) => {
    const u = req.url();
    if (u.startsWith('data:')) return req.continue();
    if (new URL(u).origin !== origin) { log.foreign.push(u); return req.abort('blockedbyclient'); }
    const h = req.headers();
    if (h.authorization) log.auth.push(h.authorization);
    if (u.endsWith('/v1/chat/completions') && req.method() === 'POST') {
      log.chats.push(req.postData());
      if (log.stub) { const body = log.stub; log.stub = null; return req.respond({ status: 200, contentType: 'text/event-stream', body }); }
    }
    req.continue();
  });
  page.on('pageerror', (e) => log.errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') log.errors.push(m.text()); });
  await page.goto(base + '/', { waitUntil: 'load' });
  return { page, log };
}

const idle = (page, ms = 60000) => page.waitForFunction(() => !document.getElementById('send').hidden &&
  !document.querySelector('.msg .dots'), { timeout: ms });
const lastAnswer = (page) => page.evaluate(() => {
  const convs = JSON.parse(localStorage.getItem('glm.conversations'));
  const c = convs.find((x) => x.id === JSON.parse(localStorage.getItem('glm.current')));
  return c.messages[c.messages.length - 1];
});
async function sendMessage(page, text) {
  await page.focus('#input');
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}
async function setSettings(page, { temperature, maxTokens, thinking }) {
  await page.click('#open-settings');
  await page.$eval('#set-temperature', (e, v) => { e.value = v; }, String(temperature));
  await page.$eval('#set-max-tokens', (e, v) => { e.value = v; }, String(maxTokens));
  await page.$eval('#set-thinking', (e, v) => { e.checked = v; }, thinking);
  await page.click('#settings-save');
}
// The API's own answer to a request body the page sent (made non-streaming).
async function apiAnswer(base, body, auth) {
  const req = JSON.parse(body);
  req.stream = false;
  delete req.stream_options;
  const headers = { 'Content-Type': 'application/json' };
  if (auth) headers.Authorization = auth;
  const res = await fetch(base + '/v1/chat/completions', { method: 'POST', headers, body: JSON.stringify(req) });
  const j = await res.json();
  return j.choices[0].message;
}
const same = (a, b) => Buffer.from(a ?? '', 'utf8').equals(Buffer.from(b ?? '', 'utf8'));

try {
  // ---- the answer shown equals the API's, byte for byte --------------------------------------
  const { page, log } = await openPage(url);
  await page.waitForFunction(() => document.getElementById('model-name').textContent.length > 0, { timeout: 10000 });
  await setSettings(page, { temperature: 0, maxTokens: 40, thinking: false });
  await sendMessage(page, 'Hello');
  await idle(page);
  const sent = JSON.parse(log.chats[0]);
  check('web_request', sent.stream === true && sent.temperature === 0 && sent.max_tokens === 40 &&
        sent.chat_template_kwargs.enable_thinking === false && sent.messages.length === 1 && sent.messages[0].content === 'Hello',
        'the page sent ' + log.chats[0]);
  const stored = await lastAnswer(page);
  await page.evaluate(() => [...document.querySelectorAll('.msg.assistant .foot button')].find((b) => b.textContent === 'Raw').click());
  const shown = await page.$eval('.msg.assistant pre.raw', (e) => e.textContent);
  const want = await apiAnswer(url, log.chats[0]);
  check('web_answer_equals_api', want.content.length > 0 && same(shown, want.content) && same(stored.content, want.content),
        `shown ${JSON.stringify(shown)} stored ${JSON.stringify(stored.content)} api ${JSON.stringify(want.content)}`);
  if (same(shown, want.content)) pass('web_answer_bytes', `${Buffer.byteLength(shown)} bytes, streamed (SSE) vs the API's JSON answer to the same request`);
  await page.evaluate(() => [...document.querySelectorAll('.msg.assistant .foot button')].find((b) => b.textContent === 'Rendered').click());

  // ---- regenerate (temperature 0: the same answer), edit and resend ---------------------------
  await page.evaluate(() => [...document.querySelectorAll('.msg.assistant .foot button')].find((b) => b.textContent === 'Regenerate').click());
  await idle(page);
  const regen = await lastAnswer(page);
  const n = await page.$$eval('.msg', (m) => m.length);
  check('web_regenerate', n === 2 && same(regen.content, want.content) && log.chats.length === 2 && log.chats[1] === log.chats[0],
        `${n} messages, ${JSON.stringify(regen.content)}`);
  await page.evaluate(() => [...document.querySelectorAll('.msg.user .foot button')].find((b) => b.textContent === 'Edit').click());
  await page.$eval('textarea.edit', (e) => { e.value = ''; });
  await page.type('textarea.edit', 'Hi there');
  await page.keyboard.press('Enter');
  await idle(page);
  const edited = JSON.parse(log.chats[2]);
  const editAnswer = await lastAnswer(page);
  const wantEdit = await apiAnswer(url, log.chats[2]);
  check('web_edit_resend', edited.messages.length === 1 && edited.messages[0].content === 'Hi there' &&
        same(editAnswer.content, wantEdit.content) && (await page.$$eval('.msg', (m) => m.length)) === 2,
        `sent ${log.chats[2]}, answer ${JSON.stringify(editAnswer.content)} api ${JSON.stringify(wantEdit.content)}`);

  // ---- Shift+Enter is a new line, Enter sends -------------------------------------------------
  await page.click('#new-chat');
  await setSettings(page, { temperature: 0, maxTokens: 16000, thinking: true });
  await page.focus('#input');
  await page.keyboard.type('Tell me');
  await page.keyboard.down('Shift'); await page.keyboard.press('Enter'); await page.keyboard.up('Shift');
  await page.keyboard.type('a long story');
  check('web_shift_enter', (await page.$eval('#input', (e) => e.value)) === 'Tell me\na long story' && log.chats.length === 3,
        'Shift+Enter did not add a line, or sent');

  // ---- stop: the reasoning streams open, stop ends the generation on the server --------------
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => {
    const d = document.querySelector('.msg.assistant details.reasoning');
    return d && d.open && d.textContent.length > 200;
  }, { timeout: 60000 });
  pass('web_reasoning_streams', 'reasoning_content shows in an open fold while it streams');
  await page.click('#stop');
  await idle(page, 20000);
  const stopped = await lastAnswer(page);
  const folded = await page.$eval('.msg.assistant details.reasoning', (d) => !d.open);
  let stats = null;
  for (let i = 0; i < 100; i++) {
    stats = await (await fetch(url + '/stats')).json();
    if (stats.request.phase === 'idle') break;
    await sleep(100);
  }
  check('web_stop', stopped.stopped === true && stats.request.phase === 'idle' && stats.request.generated_tokens < 16000,
        `stopped ${stopped.stopped}, server phase ${stats.request.phase}, generated ${stats.request.generated_tokens} of 16000`);
  console.log(`web_stop_generated ${stats.request.generated_tokens}`);
  check('web_reasoning_folds', folded && stopped.reasoning.length > 0, 'the reasoning is not folded after the answer');

  // ---- reload: both conversations are still there ----------------------------------------------
  await page.reload({ waitUntil: 'load' });
  const titles = await page.$$eval('.conv-title', (b) => b.map((x) => x.textContent));
  await page.evaluate(() => [...document.querySelectorAll('.conv-title')].find((b) => b.textContent === 'Hi there').click());
  const afterReload = await page.$$eval('.msg', (m) => m.map((x) => x.className));
  const reloaded = await lastAnswer(page);
  check('web_reload', titles.length === 2 && titles.includes('Hi there') && titles.includes('Tell me') &&
        afterReload.length === 2 && same(reloaded.content, wantEdit.content),
        `titles ${JSON.stringify(titles)}, messages ${afterReload.length}`);

  // ---- the engine panel ------------------------------------------------------------------------
  await page.waitForFunction(() => document.querySelectorAll('#figures dd').length >= 6, { timeout: 10000 });
  const figures = await page.$eval('#figures', (e) => e.textContent);
  const map = await page.$eval('#expert-map', (c) => ({ w: c.width, h: c.height, hidden: c.hidden }));
  check('web_engine_panel', /tok\/s/.test(figures) && /Expert hits/.test(figures) && map.w > 0 && map.h > 0 && !map.hidden,
        `figures ${figures}, map ${JSON.stringify(map)}`);

  // ---- hostile text renders as text (a stubbed answer: the renderer, not the model) ------------
  const hostile = [
    '<script>window.__pwned = 1</script> <img src=x onerror="window.__pwned = 2">',
    '**bold** <b>not bold</b> [click](javascript:window.__pwned=3) ![pic](http://evil.example/x.png)',
    '```html', '<iframe src="http://evil.example/"></iframe>', '```',
  ].join('\n');
  const chunk = (delta, finish = null) => 'data: ' + JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 0, model: 'm',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] }) + '\n\n';
  log.stub = chunk({ role: 'assistant', content: '' }) + chunk({ reasoning_content: '<img src=y onerror="window.__pwned=4">' }) +
    chunk({ content: hostile.slice(0, 40) }) + chunk({ content: hostile.slice(40) }) + chunk({}, 'stop') + 'data: [DONE]\n\n';
  await page.click('#new-chat');
  await sendMessage(page, '<img src=z onerror="window.__pwned=5">');
  await idle(page);
  await sleep(300);
  const h = await page.evaluate(() => {
    const box = document.getElementById('messages');
    return {
      pwned: window.__pwned,
      elements: box.querySelectorAll('script, img, iframe, b').length,
      text: box.textContent,
      strong: [...box.querySelectorAll('strong')].map((e) => e.textContent),
      links: [...box.querySelectorAll('a')].map((a) => a.getAttribute('href')),
      code: [...box.querySelectorAll('.code code')].map((e) => e.textContent),
    };
  });
  check('web_hostile_as_text', h.pwned === undefined && h.elements === 0 && h.text.includes('<script>window.__pwned = 1</script>') &&
        h.text.includes('onerror="window.__pwned = 2"') && h.text.includes('<img src=z onerror') && h.strong[0] === 'bold' &&
        h.links.every((l) => /^https?:/.test(l)) && h.code[0] === '<iframe src="http://evil.example/"></iframe>',
        JSON.stringify(h));

  // ---- screenshots, light and dark ----------------------------------------------------------------
  mkdirSync(shotDir, { recursive: true });
  await page.evaluate(() => [...document.querySelectorAll('.conv-title')].find((b) => b.textContent === 'Hi there').click());
  await sleep(200);
  await page.screenshot({ path: shotDir + '/web-light.png' });
  await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'dark' }]);
  await page.evaluate(() => window.dispatchEvent(new Event('resize')));
  await sleep(200);
  await page.screenshot({ path: shotDir + '/web-dark.png' });
  pass('web_screenshots', `${shotDir}/web-light.png and web-dark.png`);

  check('web_only_own_origin', log.foreign.length === 0, 'requests to other hosts: ' + log.foreign.join(' '));
  check('web_no_page_errors', log.errors.length === 0, log.errors.join(' | '));
  await page.close();

  // ---- the API key: a 401 asks for it; a wrong one is refused; the right one is sent as Bearer ---
  const k = await openPage(keyUrl, 'dark');
  await k.page.waitForSelector('#key-dialog[open]', { timeout: 10000 });
  await k.page.type('#key-input', 'wrong-key');
  await k.page.click('#key-save');
  await k.page.waitForFunction(() => document.getElementById('key-dialog').open && !document.getElementById('key-error').hidden,
                               { timeout: 10000 });
  pass('web_key_refused', 'a wrong key brings the dialog back, saying so');
  await k.page.$eval('#key-input', (e) => { e.value = ''; });
  await k.page.type('#key-input', key);
  await k.page.click('#key-save');
  await k.page.waitForFunction(() => document.getElementById('model-name').textContent.length > 0, { timeout: 10000 });
  await setSettings(k.page, { temperature: 0, maxTokens: 20, thinking: false });
  await sendMessage(k.page, 'Hello');
  await idle(k.page);
  const keyAnswer = await lastAnswer(k.page);
  const wantKey = await apiAnswer(keyUrl, k.log.chats[k.log.chats.length - 1], 'Bearer ' + key);
  check('web_key', !keyAnswer.error && same(keyAnswer.content, wantKey.content) && k.log.auth.includes('Bearer ' + key),
        `answer ${JSON.stringify(keyAnswer)}, auth headers ${JSON.stringify([...new Set(k.log.auth)])}`);
  check('web_key_only_own_origin', k.log.foreign.length === 0 && k.log.errors.filter((e) => !/401/.test(e)).length === 0,
        'other hosts: ' + k.log.foreign.join(' ') + ' errors: ' + k.log.errors.join(' | '));
  await k.page.close();
} catch (e) {
  fail('web_browser', e.stack || String(e));
} finally {
  await browser.close();
}
