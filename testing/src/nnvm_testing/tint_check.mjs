// Compiles WGSL files with Tint, the browsers' WGSL compiler (Dawn for Node, npm `webgpu`, on Dawn's null
// backend: no adapter needed), for the webgpu tests (nnvm_testing.tint):
//   node tint_check.mjs DAWN_INDEX_JS FILE.wgsl...
// prints one JSON line: {file: [error messages]}, an empty list where Tint accepts the module.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [dawn, ...files] = process.argv.slice(2);
const { create, globals } = await import(pathToFileURL(dawn).href);
Object.assign(globalThis, globals);
const device = await (await create(["backend=null"]).requestAdapter()).requestDevice();
const result = {};
for (const file of files) {
  const info = await device.createShaderModule({ code: readFileSync(file, "utf8") }).getCompilationInfo();
  result[file] = info.messages.filter((m) => m.type === "error").map((m) => `${m.lineNum}: ${m.message.split("\n")[0]}`);
}
console.log(JSON.stringify(result));
process.exit(0);
