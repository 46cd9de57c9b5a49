// nnvm-webgpu.js: runs a model exported by nnvm for the `webgpu` target (mod.export("model.webgpu"))
// through WebGPU (navigator.gpu): in a browser, in Deno. An ES module with no dependencies, no build step.
//
//   import * as nnvm from "./nnvm-webgpu.js";
//   const m = await nnvm.load("model.webgpu");          // fetches manifest.json, kernels.wgsl, weights.bin
//   const [y] = await m.run({ data: new Float32Array(3 * 224 * 224) });
//
// The weights go to the device once, at load; the activations live in one arena buffer bound at offsets
// (the plan's); a run writes the inputs, submits one command buffer and maps the outputs back.

const FORMAT = "nnvm-webgpu-web";
const VERSION = 1;

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, int16: Int16Array, uint16: Uint16Array,
  int8: Int8Array, uint8: Uint8Array, bool: Uint8Array, float16: Uint16Array,
};

const round4 = (n) => Math.max(4, Math.ceil(n / 4) * 4);

async function fetchOk(url, what) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`nnvm: cannot fetch the ${what} ${url} (HTTP ${response.status})`);
  return response;
}

/** The device: `options.device` if given, else one from navigator.gpu with the limits the model needs. */
async function openDevice(limits, options) {
  if (options.device) return options.device;
  if (!globalThis.navigator?.gpu) throw new Error("nnvm: this JavaScript runtime has no WebGPU (navigator.gpu)");
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) throw new Error("nnvm: no WebGPU adapter is available");
  const requiredLimits = {};
  for (const [name, need] of Object.entries(limits)) {
    const have = adapter.limits[name];
    if (have === undefined) continue;
    if (need > have) throw new Error(`nnvm: the model needs ${name} = ${need}, this WebGPU adapter allows ${have}`);
    requiredLimits[name] = need; // below the default: the device gets the default
  }
  return await adapter.requestDevice({ requiredLimits });
}

/** Load the exported folder at `url` (a string or URL; "model.webgpu" or "model.webgpu/"). */
export async function load(url, options = {}) {
  const base = new URL(String(url).endsWith("/") ? String(url) : `${url}/`, globalThis.location?.href);
  const manifest = await (await fetchOk(new URL("manifest.json", base), "manifest")).json();
  if (manifest.format !== FORMAT || manifest.version !== VERSION) {
    throw new Error(`nnvm: ${base} is not an nnvm WebGPU model of version ${VERSION} (got ${manifest.format} ${manifest.version})`);
  }
  const [source, weights] = await Promise.all([
    fetchOk(new URL("kernels.wgsl", base), "kernels").then((r) => r.text()),
    fetchOk(new URL("weights.bin", base), "weights").then((r) => r.arrayBuffer()),
  ]);
  const device = await openDevice(manifest.limits, options);
  return new Model(device, manifest, source, weights);
}

export class Model {
  constructor(device, manifest, source, weights) {
    this.device = device;
    this.manifest = manifest;
    this.plan = manifest.module.plan;
    this.inputs = this.plan.inputs.map(({ name, shape, dtype }) => ({ name, shape, dtype }));
    this.outputs = this.plan.outputs.map(({ name, shape, dtype }) => ({ name, shape, dtype }));
    this.weightBytes = weights;
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    this.weights = device.createBuffer({ size: round4(weights.byteLength), usage });
    if (weights.byteLength) device.queue.writeBuffer(this.weights, 0, weights, 0, weights.byteLength & ~3);
    this.arena = device.createBuffer({ size: round4(this.plan.arena_bytes), usage });
    this.module = device.createShaderModule({ code: source });
    this.launches = [];
    const pipelines = new Map();
    const functions = new Map(manifest.functions.map((f) => [f.name, f]));
    for (const call of this.plan.calls) {
      const table = functions.get(call.kernel);
      const temporaries = table.temporaries.map((t) => device.createBuffer({ size: round4(t.nbytes), usage }));
      let resources = call.args.map((ref, i) => this.#binding(ref, table.params[i].nbytes))
        .concat(temporaries.map((buffer) => ({ buffer })));
      // Parameters read through one packed binding (a kernel binds at most 8 storage buffers): copied
      // into it before each launch, at their word offsets.
      const copies = [];
      if (table.packed.length) {
        const words = table.packed.reduce((sum, [, , nbytes]) => sum + Math.ceil(nbytes / 4), 0);
        const pack = device.createBuffer({ size: 4 * Math.max(words, 1), usage });
        for (const [i, offset, nbytes] of table.packed) {
          copies.push([resources[i].buffer, resources[i].offset ?? 0, pack, 4 * offset, round4(nbytes)]);
        }
        const skip = new Set(table.packed.map(([i]) => i));
        resources = resources.filter((_, i) => !skip.has(i)).concat([{ buffer: pack }]);
      }
      for (const launch of table.launches) {
        if (!pipelines.has(launch.kernel)) pipelines.set(launch.kernel, this.#pipeline(launch.kernel, resources.length));
        const { pipeline, layout } = pipelines.get(launch.kernel);
        const entries = resources.map((resource, binding) => ({ binding, resource }));
        this.launches.push({ pipeline, group: device.createBindGroup({ layout, entries }), grid: launch.grid, copies });
      }
    }
  }

  #binding(ref, nbytes) {
    if ("arena" in ref) {
      return { buffer: this.arena, offset: ref.arena, size: Math.min(round4(nbytes), round4(this.plan.arena_bytes) - ref.arena) };
    }
    const w = this.manifest.weights[ref.param];
    return { buffer: this.weights, offset: w.offset, size: round4(w.nbytes) };
  }

  #pipeline(kernel, count) {
    const entries = Array.from({ length: count }, (_, binding) => (
      { binding, visibility: GPUShaderStage.COMPUTE, buffer: { type: "storage" } }));
    const layout = this.device.createBindGroupLayout({ entries });
    const pipeline = this.device.createComputePipeline({
      layout: this.device.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module: this.module, entryPoint: kernel },
    });
    return { pipeline, layout };
  }

  /** Run on `feeds` ({name: TypedArray}); resolves to the outputs, typed arrays in the plan's order. */
  async run(feeds) {
    const device = this.device;
    for (const d of this.plan.inputs) {
      const value = feeds[d.name];
      if (value === undefined) throw new Error(`nnvm: no value for the input ${d.name}`);
      const count = d.shape.reduce((a, b) => a * b, 1);
      const Type = ARRAYS[d.dtype];
      if (!(value instanceof Type) || value.length !== count) {
        throw new Error(`nnvm: the input ${d.name} must be a ${Type.name} of ${count} elements (shape [${d.shape}])`);
      }
      if (value instanceof BigInt64Array || value instanceof BigUint64Array) {
        // WGSL computes 64-bit integers in 32 bits: a value beyond them would give a wrong answer
        const lo = value instanceof BigInt64Array ? -(2n ** 31n) : 0n, hi = value instanceof BigInt64Array ? 2n ** 31n - 1n : 2n ** 32n - 1n;
        for (const v of value) {
          if (v < lo || v > hi) throw new Error(`nnvm: the input ${d.name} holds ${v}, beyond the 32 bits WebGPU computes ${d.dtype} in`);
        }
      }
      if (!("arena" in d.ref)) continue;
      const bytes = new Uint8Array(round4(value.byteLength));
      bytes.set(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
      device.queue.writeBuffer(this.arena, d.ref.arena, bytes);
    }
    const encoder = device.createCommandEncoder();
    let pass = null;
    for (const { pipeline, group, grid, copies } of this.launches) {
      if (copies.length && pass) { pass.end(); pass = null; } // copies go between passes
      for (const copy of copies) encoder.copyBufferToBuffer(...copy);
      pass ??= encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(grid[0], grid[1], grid[2]);
    }
    pass?.end();
    const reads = this.plan.outputs.map((d) => {
      if (!("arena" in d.ref)) return null;
      const staging = device.createBuffer({ size: round4(d.ref.nbytes), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      encoder.copyBufferToBuffer(this.arena, d.ref.arena, staging, 0, round4(d.ref.nbytes));
      return staging;
    });
    device.queue.submit([encoder.finish()]);
    return await Promise.all(this.plan.outputs.map(async (d, i) => {
      const Type = ARRAYS[d.dtype];
      const count = d.shape.reduce((a, b) => a * b, 1);
      if (reads[i] === null) {
        const w = this.manifest.weights[d.ref.param];
        return new Type(this.weightBytes.slice(w.offset, w.offset + w.nbytes));
      }
      await reads[i].mapAsync(GPUMapMode.READ);
      const out = new Type(reads[i].getMappedRange().slice(0, count * Type.BYTES_PER_ELEMENT));
      reads[i].unmap();
      reads[i].destroy();
      return out;
    }));
  }
}
