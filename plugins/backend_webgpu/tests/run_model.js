// Runs an exported model.webgpu folder with nnvm-webgpu.js in Deno, for test_webgpu_javascript.py:
//   deno run --allow-read --allow-write run_model.js RUNTIME_JS MODEL_DIR IN_DIR OUT_DIR
// reads IN_DIR/<input name>.bin (raw little-endian values), writes OUT_DIR/<k>.bin for output k.
const [runtime, model, inDir, outDir] = Deno.args;
const nnvm = await import(new URL(`file://${runtime}`).href);
const m = await nnvm.load(new URL(`file://${model}/`));
const types = { float32: Float32Array, int32: Int32Array, int64: BigInt64Array, uint8: Uint8Array, bool: Uint8Array };
const feeds = {};
for (const { name, dtype } of m.inputs) {
  const bytes = await Deno.readFile(`${inDir}/${name}.bin`);
  const Type = types[dtype];
  feeds[name] = new Type(bytes.buffer, bytes.byteOffset, bytes.byteLength / Type.BYTES_PER_ELEMENT);
}
const outs = await m.run(feeds);
for (const [k, y] of outs.entries()) {
  await Deno.writeFile(`${outDir}/${k}.bin`, new Uint8Array(y.buffer, y.byteOffset, y.byteLength));
}
