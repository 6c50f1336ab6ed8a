// Rank a built MkDocs site's pages for a query with mkdocs-material's own search
// worker (the script the browser runs), as tests/docs/test_site_search.py needs:
//   node search_rank.js SITE_DIR "QUERY"   ->   JSON list of locations, best first.
// The worker is loaded into a sandbox that stands in for a web worker's globals.
"use strict";
const fs = require("fs");
const path = require("path");
const vm = require("vm");

const [site, query] = process.argv.slice(2);
const dir = path.join(site, "assets", "javascripts", "workers");
const script = fs.readdirSync(dir).find((name) => /^search\..*\.min\.js$/.test(name));
const answers = [];
const sandbox = {
  console,
  setTimeout,
  postMessage: (message) => answers.push(message),
  addEventListener: (type, listener) => { sandbox.listener = listener; },
};
sandbox.self = sandbox;
vm.createContext(sandbox);
vm.runInContext(fs.readFileSync(path.join(dir, script), "utf8"), sandbox);

const index = JSON.parse(fs.readFileSync(path.join(site, "search", "search_index.json"), "utf8"));
const SETUP = 0, QUERY = 2, RESULT = 3;  // the worker's message types
const READY = 1;
// The worker answers asynchronously: wait (a tick at a time) for its answer.
async function answer(type) {
  for (let tick = 0; tick < 1000; tick++) {
    const found = answers.find((message) => message.type === type);
    if (found) return found;
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
  throw new Error(`the search worker gave no answer of type ${type}`);
}

(async () => {
  sandbox.listener({ data: { type: SETUP, data: { ...index, options: { suggest: false } } } });
  await answer(READY);
  sandbox.listener({ data: { type: QUERY, data: query } });
  const result = await answer(RESULT);
  // Each item is a group (a page and its sections), best first; flatten by score.
  const items = result.data.items.flat().sort((a, b) => b.score - a.score);
  process.stdout.write(JSON.stringify(items.map((item) => item.location)));
})();
