// The official Anthropic, OpenAI (Responses) and Ollama npm clients against glm's server
// (tests/t_server.sh runs it).
//
// usage: node tests/server_apis.mjs NPM_DIR URL MODEL EXPECTED MAX_TOKENS TOOLS_REQUEST TOOLS_EXPECTED [KEY]
//   URL             the server's root (http://127.0.0.1:PORT, no /v1)
//   EXPECTED        file: PROMPT mode's answer to "Hello" (THINK=0, TEMPERATURE=0, NGEN=MAX_TOKENS)
//   TOOLS_REQUEST   file: an OpenAI chat {"messages", "tools"} tool round trip (get_weather), which is
//                   sent again here in each API's own form
//   TOOLS_EXPECTED  file: PROMPT mode's answer with MESSAGES=TOOLS_REQUEST (same settings)
//   KEY             the server's API_KEY: then only the authentication checks run
// Prints PASS/FAIL lines. Each API's answer (thinking off, temperature 0) must equal EXPECTED byte
// for byte, whole and streamed; the tool round trip must equal TOOLS_EXPECTED.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { loadOpenAI, check, attempt, finish as done } from "./openai_harness.mjs";

const [npmDir, url, model, expectedFile, maxTokensArg, toolsFile, toolsExpectedFile, key] = process.argv.slice(2);
const load = async (rel) => import(pathToFileURL(path.join(npmDir, "node_modules", rel)).href);
const { default: Anthropic } = await load("@anthropic-ai/sdk/index.mjs");
const { Ollama } = await load("ollama/dist/index.mjs");
const OpenAI = await loadOpenAI(npmDir);
const N = Number(maxTokensArg);
const hello = [{ role: "user", content: "Hello" }];
const show = (s) => JSON.stringify(s).slice(0, 300);

if (key) {   // API_KEY: each client with the key passes, without it gets 401 in its API's shape
  for (const [name, good, bad] of [
    ["anthropic", new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0 }), new Anthropic({ baseURL: url, apiKey: "wrong", maxRetries: 0 })],
    ["responses", new OpenAI({ baseURL: url + "/v1", apiKey: key, maxRetries: 0 }), new OpenAI({ baseURL: url + "/v1", apiKey: "wrong", maxRetries: 0 })],
  ]) {
    await attempt(`${name}_api_key`, async () => {
      const call = (c) => name === "anthropic"
        ? c.messages.create({ model, max_tokens: 2, messages: hello })
        : c.responses.create({ model, input: "Hello", max_output_tokens: 2 });
      const r = await call(good);
      let err = null;
      try { await call(bad); } catch (e) { err = e; }
      const shapeOk = name === "anthropic" ? err && err.error && err.error.type === "error" && err.error.error.type === "authentication_error"
                                           : err && err.error && err.error.type === "authentication_error";
      check(`${name}_api_key: the right key passes, a wrong one gets 401 in the API's error shape`,
            r && err && err.status === 401 && shapeOk, `${err && err.status} ${show(err && err.error)}`);
    });
  }
  await attempt("ollama_api_key", async () => {
    const good = new Ollama({ host: url, headers: { Authorization: `Bearer ${key}` } });
    const r = await good.chat({ model, messages: hello, stream: false, options: { num_predict: 2 } });
    let err = null;
    try { await new Ollama({ host: url }).chat({ model, messages: hello, stream: false }); } catch (e) { err = e; }
    check("ollama_api_key: Bearer passes, none gets 401 as {\"error\": ...}", r.done && err && err.status_code === 401 && /API key/.test(err.error),
          `${err && err.status_code} ${err && err.error}`);
  });
  done();
}

const expected = fs.readFileSync(expectedFile, "utf8");
const toolsReq = JSON.parse(fs.readFileSync(toolsFile, "utf8"));
const toolsWant = fs.readFileSync(toolsExpectedFile, "utf8");
const fn = toolsReq.tools[0].function;
const call = toolsReq.messages[1].tool_calls[0];
const callArgs = JSON.parse(call.function.arguments);
const toolOutput = toolsReq.messages[2].content;

// ---- Anthropic Messages ---------------------------------------------------------------------------
const anthropic = new Anthropic({ baseURL: url, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const aBase = { model, max_tokens: N, temperature: 0, thinking: { type: "disabled" }, messages: hello };
const aText = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

await attempt("anthropic_models", async () => {
  const ids = [];
  for await (const m of anthropic.models.list()) ids.push(m.id);
  check("anthropic models.list names the model", ids.length === 1 && ids[0] === model, JSON.stringify(ids));
});

await attempt("anthropic_create", async () => {
  const m = await anthropic.messages.create(aBase);
  check("anthropic messages.create == PROMPT mode's answer, stop_reason max_tokens", aText(m) === expected && m.stop_reason === "max_tokens" &&
        m.type === "message" && m.role === "assistant" && m.usage.output_tokens === N, show(m));
  const c = await anthropic.messages.countTokens({ model, thinking: { type: "disabled" }, messages: hello });
  check("anthropic countTokens == the prompt tokens messages.create reports (input + cache_read)",
        c.input_tokens === m.usage.input_tokens + m.usage.cache_read_input_tokens && c.input_tokens > 0, `${show(c)} vs ${show(m.usage)}`);
});

await attempt("anthropic_stream", async () => {
  const events = [];
  let text = "";
  const stream = anthropic.messages.stream(aBase);
  stream.on("streamEvent", (e) => events.push(e.type));
  stream.on("text", (t) => { text += t; });
  const m = await stream.finalMessage();
  const order = [...new Set(events)].join(",");
  check("anthropic messages.stream: the text deltas and finalMessage == PROMPT mode's answer", text === expected && aText(m) === expected &&
        m.stop_reason === "max_tokens", show(text));
  check("anthropic stream events in order: message_start, content_block_start, content_block_delta, content_block_stop, message_delta, message_stop",
        order === "message_start,content_block_start,content_block_delta,content_block_stop,message_delta,message_stop", order);
});

await attempt("anthropic_tool_round_trip", async () => {
  const m = await anthropic.messages.create({
    model, max_tokens: N, temperature: 0, thinking: { type: "disabled" },
    tools: [{ name: fn.name, description: fn.description, input_schema: fn.parameters }],
    messages: [
      { role: "user", content: toolsReq.messages[0].content },
      { role: "assistant", content: [{ type: "tool_use", id: call.id, name: fn.name, input: callArgs }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: toolOutput }] },
    ],
  });
  check("anthropic tool round trip (tool_use, tool_result, input_schema) == PROMPT with MESSAGES", aText(m) === toolsWant,
        `${show(aText(m))} vs ${show(toolsWant)}`);
});

await attempt("anthropic_errors", async () => {
  for (const [name, body, pat] of [
    ["max_tokens is required", { model, messages: hello }, /max_tokens/],
    ["tool_choice any without tools is refused by name", { ...aBase, tool_choice: { type: "any" } }, /needs "tools"/],
  ]) {
    let err = null;
    try { await anthropic.messages.create(body); } catch (e) { err = e; }
    check(`anthropic 400 (${name}) in Anthropic's error shape`, err instanceof Anthropic.BadRequestError && err.error.type === "error" &&
          err.error.error.type === "invalid_request_error" && pat.test(err.error.error.message), `${err && err.status} ${show(err && err.error)}`);
  }
});

// ---- OpenAI Responses -----------------------------------------------------------------------------
const openai = new OpenAI({ baseURL: url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
const rBase = { model, input: "Hello", max_output_tokens: N, temperature: 0, reasoning: { effort: "none" } };

await attempt("responses_create", async () => {
  const r = await openai.responses.create(rBase);
  check("responses.create output_text == PROMPT mode's answer, status incomplete (max_output_tokens)", r.output_text === expected &&
        r.status === "incomplete" && r.incomplete_details.reason === "max_output_tokens" && r.usage.output_tokens === N, show(r));
});

await attempt("responses_stream", async () => {
  const s = await openai.responses.create({ ...rBase, stream: true });
  let text = "", seq = -1, ordered = true;
  const types = [];
  for await (const e of s) {
    if (e.sequence_number !== seq + 1) ordered = false;
    seq = e.sequence_number;
    types.push(e.type);
    if (e.type === "response.output_text.delta") text += e.delta;
  }
  check("responses stream: the output_text deltas == PROMPT mode's answer, sequence_number 0, 1, 2, ...", text === expected && ordered,
        `${show(text)} ordered ${ordered}`);
  const first = types.slice(0, 4).join(","), last = types.slice(-4).join(",");
  check("responses stream events: created, in_progress, output_item.added, content_part.added ... output_text.done, content_part.done, " +
        "output_item.done, incomplete", first === "response.created,response.in_progress,response.output_item.added,response.content_part.added" &&
        last === "response.output_text.done,response.content_part.done,response.output_item.done,response.incomplete", `${first} ... ${last}`);
  const helper = openai.responses.stream(rBase);
  let helped = "";
  helper.on("response.output_text.delta", (e) => { helped += e.delta; });
  const final = await helper.finalResponse();
  check("responses.stream helper: deltas and finalResponse().output_text == PROMPT mode's answer", helped === expected &&
        final.output_text === expected, show(final.output_text));
});

await attempt("responses_tool_round_trip", async () => {
  const r = await openai.responses.create({
    model, max_output_tokens: N, temperature: 0, reasoning: { effort: "none" },
    tools: [{ type: "function", name: fn.name, description: fn.description, parameters: fn.parameters }],
    input: [
      { role: "user", content: toolsReq.messages[0].content },
      { type: "function_call", call_id: call.id, name: fn.name, arguments: call.function.arguments },
      { type: "function_call_output", call_id: call.id, output: toolOutput },
    ],
  });
  check("responses tool round trip (function_call, function_call_output) == PROMPT with MESSAGES", r.output_text === toolsWant,
        `${show(r.output_text)} vs ${show(toolsWant)}`);
});

await attempt("responses_errors", async () => {
  let err = null;
  try { await openai.responses.create({ ...rBase, previous_response_id: "resp_1" }); } catch (e) { err = e; }
  check("responses previous_response_id is refused by name (400, OpenAI's shape)", err instanceof OpenAI.BadRequestError &&
        err.param === "previous_response_id", `${err && err.status} ${err && err.message}`);
});

// ---- Ollama ---------------------------------------------------------------------------------------
const ollama = new Ollama({ host: url });
const oBase = { model, think: false, options: { temperature: 0, num_predict: N } };

await attempt("ollama_chat", async () => {
  const r = await ollama.chat({ ...oBase, messages: hello, stream: false });
  check("ollama chat == PROMPT mode's answer, done_reason length, counts and durations", r.message.content === expected && r.done &&
        r.done_reason === "length" && r.eval_count === N && r.prompt_eval_count > 0 && r.total_duration > 0, show(r));
  let text = "", parts = 0, last = null;
  for await (const part of await ollama.chat({ ...oBase, messages: hello, stream: true })) { text += part.message.content; parts++; last = part; }
  check("ollama chat streamed (NDJSON): the pieces == PROMPT mode's answer, the last one done", text === expected && parts > 3 && last.done &&
        last.eval_count === N, `${show(text)} ${parts} parts`);
});

await attempt("ollama_generate", async () => {
  const r = await ollama.generate({ ...oBase, prompt: "Hello", stream: false });
  check("ollama generate == PROMPT mode's answer", r.response === expected && r.done_reason === "length", show(r));
  let text = "";
  for await (const part of await ollama.generate({ ...oBase, prompt: "Hello", stream: true })) text += part.response;
  check("ollama generate streamed == PROMPT mode's answer", text === expected, show(text));
});

await attempt("ollama_list", async () => {
  const l = await ollama.list();
  const ps = await ollama.ps();
  const s = await ollama.show({ model });
  check("ollama list, ps and show name the model", l.models.length === 1 && l.models[0].name === model && ps.models[0].name === model &&
        s.capabilities.includes("tools"), `${show(l)} ${show(s)}`);
});

await attempt("ollama_tool_round_trip", async () => {
  const r = await ollama.chat({
    ...oBase, stream: false, tools: toolsReq.tools,
    messages: [
      { role: "user", content: toolsReq.messages[0].content },
      { role: "assistant", content: "", tool_calls: [{ function: { name: fn.name, arguments: callArgs } }] },
      { role: "tool", content: toolOutput, tool_name: fn.name },
    ],
  });
  check("ollama tool round trip (tool_calls, a tool message) == PROMPT with MESSAGES", r.message.content === toolsWant,
        `${show(r.message.content)} vs ${show(toolsWant)}`);
});

await attempt("ollama_errors", async () => {
  let err = null;
  const format = { type: "string", pattern: "a+" };
  try { await ollama.chat({ ...oBase, messages: hello, stream: false, format }); } catch (e) { err = e; }
  check("ollama format with an unenforced keyword is refused by name (400, {\"error\": ...})",
        err && err.status_code === 400 && /format.*'pattern' is not enforced/.test(err.error),
        `${err && err.status_code} ${err && err.error}`);
});

done();
