// Runs an exported model.webgpu folder with nnvm-webgpu.js in Deno, for the plugin's tests:
//   deno run --allow-read --allow-write run_model.js RUNTIME_JS MODEL_DIR IN_DIR OUT_DIR
// reads IN_DIR/<input name>.bin (raw little-endian values) and, if there, IN_DIR/shapes.json ({input: shape},
// for a model with symbolic dims); writes OUT_DIR/<k>.bin for output k and OUT_DIR/shapes.json (their
// shapes). The runtime's own errors ("nnvm: ...") are printed alone on stderr, exit status 1.
const [runtime, model, inDir, outDir] = Deno.args;
const nnvm = await import(new URL(`file://${runtime}`).href);
try {
  const m = await nnvm.load(new URL(`file://${model}/`));
  const types = { float32: Float32Array, int32: Int32Array, int64: BigInt64Array, uint8: Uint8Array, bool: Uint8Array };
  let shapes = null;
  try {
    shapes = JSON.parse(await Deno.readTextFile(`${inDir}/shapes.json`));
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  const feeds = {};
  for (const { name, dtype } of m.inputs) {
    const bytes = await Deno.readFile(`${inDir}/${name}.bin`);
    const Type = types[dtype];
    const data = new Type(bytes.buffer, bytes.byteOffset, bytes.byteLength / Type.BYTES_PER_ELEMENT);
    feeds[name] = shapes ? { data, shape: shapes[name] } : data;
  }
  const outs = await m.run(feeds);
  for (const [k, y] of outs.entries()) {
    await Deno.writeFile(`${outDir}/${k}.bin`, new Uint8Array(y.buffer, y.byteOffset, y.byteLength));
  }
  await Deno.writeTextFile(`${outDir}/shapes.json`, JSON.stringify(outs.map((y) => y.shape)));
} catch (e) {
  if (!String(e.message).startsWith("nnvm: ")) throw e;
  console.error(e.message);
  Deno.exit(1);
}
