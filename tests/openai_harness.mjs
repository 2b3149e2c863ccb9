// What tests/http_openai.mjs and tests/server_openai.mjs share: the official `openai` package loaded
// from NPM_DIR, PASS/FAIL lines, and a streamed chat answer read whole.
import path from "node:path";
import { pathToFileURL } from "node:url";

// The package's OpenAI class (its error classes hang off it: OpenAI.BadRequestError, ...).
export async function loadOpenAI(npmDir) {
  const { default: OpenAI } = await import(pathToFileURL(path.join(npmDir, "node_modules/openai/index.mjs")).href);
  return OpenAI;
}

let failed = 0;
export const check = (name, ok, why) => {
  if (ok) console.log(`PASS ${name}`);
  else { console.log(`FAIL ${name}: ${why}`); failed++; }
};
// Runs fn; an exception is a FAIL line for `name` naming what was thrown.
export const attempt = async (name, fn) => {
  try { await fn(); } catch (e) { check(name, false, `threw ${e && e.constructor && e.constructor.name}: ${e && e.message}`); }
};
export const finish = () => process.exit(failed ? 1 : 0);

// The concatenated delta.content, the finish_reason, the usage chunk and the number of chunks.
export async function readChatStream(stream) {
  let content = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta && c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { content, finish, usage, chunks };
}
