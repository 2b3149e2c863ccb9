// The official `openai` npm client against glm's server (tests/t_server.sh runs it).
//
// usage: node tests/server_openai.mjs NPM_DIR BASE_URL MODEL EXPECTED MAX_TOKENS TOOLS_REQUEST TOOLS_EXPECTED
//   EXPECTED        file: PROMPT mode's answer to "Hello" (THINK=0, TEMPERATURE=0, NGEN=MAX_TOKENS)
//   TOOLS_REQUEST   file: a {"messages", "tools"} tool round trip (assistant tool_calls, a tool message)
//   TOOLS_EXPECTED  file: PROMPT mode's answer with MESSAGES=TOOLS_REQUEST (same settings)
// Prints PASS/FAIL lines: the model list; a chat answer and a streamed one equal to EXPECTED byte for
// byte (thinking off through chat_template_kwargs, as with vLLM and SGLang); usage; a completion;
// the tool round trip; the client's BadRequestError for a field of the wrong type.
import fs from "node:fs";
import { loadOpenAI, check, attempt, finish as done, readChatStream } from "./openai_harness.mjs";

const [npmDir, baseURL, model, expectedFile, maxTokensArg, toolsFile, toolsExpectedFile] = process.argv.slice(2);
const OpenAI = await loadOpenAI(npmDir);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const expected = fs.readFileSync(expectedFile, "utf8");
const maxTokens = Number(maxTokensArg);
const noThinking = { chat_template_kwargs: { enable_thinking: false } };
const hello = [{ role: "user", content: "Hello" }];

await attempt("openai_models_list", async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  check("openai_models_list", ids.length === 1 && ids[0] === model, JSON.stringify(ids));
});

await attempt("openai_chat_equals_prompt_mode", async () => {
  const r = await client.chat.completions.create({ model, messages: hello, temperature: 0, max_tokens: maxTokens, ...noThinking });
  const c = r.choices[0];
  check("openai_chat_equals_prompt_mode", c.message.content === expected && c.finish_reason === "length" && c.message.role === "assistant",
        `${JSON.stringify(c.message.content)} vs ${JSON.stringify(expected)}, finish ${c.finish_reason}`);
  check("openai_chat_usage", r.usage.completion_tokens === maxTokens && r.usage.prompt_tokens > 0 &&
        r.usage.total_tokens === r.usage.prompt_tokens + maxTokens && r.object === "chat.completion" && r.model === model,
        JSON.stringify(r.usage));
});

await attempt("openai_stream_equals_prompt_mode", async () => {
  const stream = await client.chat.completions.create({
    model, messages: hello, temperature: 0, max_completion_tokens: maxTokens, stream: true,
    stream_options: { include_usage: true }, ...noThinking,
  });
  const { content, finish, usage, chunks } = await readChatStream(stream);
  check("openai_stream_equals_prompt_mode", content === expected && finish === "length" && chunks > 3,
        `${JSON.stringify(content)} vs ${JSON.stringify(expected)}, finish ${finish}, ${chunks} chunks`);
  check("openai_stream_usage_chunk", usage && usage.completion_tokens === maxTokens, JSON.stringify(usage));
});

await attempt("openai_completion", async () => {
  const r = await client.completions.create({ model, prompt: "Hello", max_tokens: 5, temperature: 0 });
  check("openai_completion", typeof r.choices[0].text === "string" && r.choices[0].finish_reason === "length" &&
        r.usage.completion_tokens === 5 && r.object === "text_completion", JSON.stringify(r));
});

await attempt("openai_tool_round_trip", async () => {
  const req = JSON.parse(fs.readFileSync(toolsFile, "utf8"));
  const want = fs.readFileSync(toolsExpectedFile, "utf8");
  const r = await client.chat.completions.create({ model, ...req, temperature: 0, max_tokens: maxTokens, ...noThinking });
  check("openai_tool_round_trip_equals_prompt_mode", r.choices[0].message.content === want,
        `${JSON.stringify(r.choices[0].message.content)} vs ${JSON.stringify(want)}`);
});

await attempt("openai_bad_request_400", async () => {
  try {
    await client.chat.completions.create({ model, messages: hello, temperature: "hot" });
    check("openai_bad_request_400", false, "no error");
  } catch (e) {
    check("openai_bad_request_400", e instanceof OpenAI.BadRequestError && e.status === 400 && /temperature/.test(e.message),
          `got ${e.constructor.name} status ${e.status}: ${e.message}`);
  }
});

await attempt("openai_context_length_exceeded", async () => {
  try {
    await client.chat.completions.create({ model, messages: hello, max_tokens: 1000000 });
    check("openai_context_length_exceeded", false, "no error");
  } catch (e) {
    check("openai_context_length_exceeded", e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded" &&
          e.param === "max_tokens", `got ${e.constructor.name} ${e.code} ${e.param}: ${e.message}`);
  }
});

done();
