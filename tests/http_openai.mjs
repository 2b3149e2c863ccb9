// The official `openai` npm client against an OpenAI-compatible server (tests/t_http.sh runs it
// against tests/bin/http_echo; the glm server tests can reuse it).
//
// usage: node tests/http_openai.mjs NPM_DIR BASE_URL API_KEY
//   NPM_DIR   folder where `npm install --prefix NPM_DIR openai@VERSION` ran
//   BASE_URL  e.g. http://127.0.0.1:8080/v1
// Prints PASS/FAIL lines: models.list, a chat completion, a streamed one (the concatenated deltas
// must equal the non-streamed content, with usage when asked), a legacy completion, and the
// client's error classes for 400 and 404 (the wrong key case is checked with a separate server).
import { loadOpenAI, check, attempt, finish as done, readChatStream } from "./openai_harness.mjs";

const [npmDir, baseURL, apiKey] = process.argv.slice(2);
if (!npmDir || !baseURL) {
  console.log("FAIL openai_usage: node http_openai.mjs NPM_DIR BASE_URL [API_KEY]");
  process.exit(1);
}
const OpenAI = await loadOpenAI(npmDir);
// No retries: a retry could hide a dropped or refused request.
const client = new OpenAI({ baseURL, apiKey: apiKey || "none", maxRetries: 0, timeout: 20000 });

const mode = process.argv[5] || "all";

if (mode === "wrong_key") {
  await attempt("openai_wrong_key_401", async () => {
    try {
      await client.models.list();
      check("openai_wrong_key_401", false, "no error");
    } catch (e) {
      check("openai_wrong_key_401", e instanceof OpenAI.AuthenticationError && e.status === 401,
            `got ${e.constructor.name} status ${e.status}`);
    }
  });
  done();
}

await attempt("openai_models_list", async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  check("openai_models_list", ids.length === 1 && ids[0] === "echo-model", JSON.stringify(ids));
});

const text = "Hello, wörld! 你好 🙂 \"quoted\" \\ back\nnew line";
const messages = [{ role: "system", content: "be brief" }, { role: "user", content: text }];
let plain = null;
await attempt("openai_chat_json", async () => {
  const r = await client.chat.completions.create({ model: "echo-model", messages, temperature: 0 });
  plain = r.choices[0].message.content;
  check("openai_chat_json", plain === "echo: " + text && r.choices[0].finish_reason === "stop" && r.usage.total_tokens === 2,
        JSON.stringify(r));
});

await attempt("openai_chat_stream", async () => {
  const stream = await client.chat.completions.create({
    model: "echo-model", messages, stream: true, stream_options: { include_usage: true },
  });
  const { content, finish, usage, chunks } = await readChatStream(stream);
  check("openai_chat_stream", content === plain && finish === "stop" && chunks > 3,
        `content ${JSON.stringify(content)} vs ${JSON.stringify(plain)}, finish ${finish}, ${chunks} chunks`);
  check("openai_chat_stream_usage", usage && usage.completion_tokens > 0, JSON.stringify(usage));
});

await attempt("openai_completion", async () => {
  const r = await client.completions.create({ model: "echo-model", prompt: "abc" });
  check("openai_completion", r.choices[0].text === "echo: abc", JSON.stringify(r));
});

await attempt("openai_bad_request_400", async () => {
  try {
    await client.chat.completions.create({ model: "echo-model", messages: [] });
    check("openai_bad_request_400", false, "no error");
  } catch (e) {
    check("openai_bad_request_400", e instanceof OpenAI.BadRequestError && e.status === 400 && /messages/.test(e.message),
          `got ${e.constructor.name} status ${e.status}: ${e.message}`);
  }
});

await attempt("openai_not_found_404", async () => {
  try {
    await client.embeddings.create({ model: "echo-model", input: "x" });
    check("openai_not_found_404", false, "no error");
  } catch (e) {
    check("openai_not_found_404", e instanceof OpenAI.NotFoundError && e.status === 404,
          `got ${e.constructor.name} status ${e.status}`);
  }
});

// Several requests on the client's keep-alive connections, streamed and not, interleaved.
await attempt("openai_sequential_keepalive", async () => {
  let ok = 0;
  for (let i = 0; i < 6; i++) {
    const content = `n${i}`;
    if (i % 2) {
      const s = await client.chat.completions.create({ model: "echo-model", messages: [{ role: "user", content }], stream: true });
      let got = "";
      for await (const ch of s) for (const c of ch.choices) got += (c.delta && c.delta.content) || "";
      ok += got === "echo: " + content;
    } else {
      const r = await client.chat.completions.create({ model: "echo-model", messages: [{ role: "user", content }] });
      ok += r.choices[0].message.content === "echo: " + content;
    }
  }
  check("openai_sequential_keepalive", ok === 6, `${ok}/6 right`);
});

done();
