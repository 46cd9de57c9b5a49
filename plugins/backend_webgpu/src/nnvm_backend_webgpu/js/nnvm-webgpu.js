// nnvm-webgpu.js: runs a model exported by nnvm for the `webgpu` target (mod.export("model.webgpu"))
// through WebGPU (navigator.gpu): in a browser, in Deno. An ES module with no dependencies, no build step.
//
//   import * as nnvm from "./nnvm-webgpu.js";
//   const m = await nnvm.load("model.webgpu");          // fetches manifest.json, kernels.wgsl, weights.bin
//   const [y] = await m.run({ data: new Float32Array(3 * 224 * 224) });
//   // a model with symbolic dims (m.dims): inputs with their shapes, outputs carry theirs (y.shape)
//   const [h] = await m.run({ input_ids: { data: ids, shape: [2, 33] }, attention_mask: { data: mask, shape: [2, 33] } });
//
// The weights go to the device once, at load; the activations live in one arena buffer bound at offsets
// (the plan's); a run writes the inputs, submits one command buffer and maps the outputs back.
//
// A folder of version 2 holds a module with symbolic dims (manifest.module.symbolic, written by
// nnvm.runtime.symbolic.describe): its plan is made for every dim at its upper bound (plan.dims), so every
// smaller binding fits at the same offsets. A run binds the dims from the inputs' shapes (the checks and
// sentences of Python's DimSignature.bind), writes their values into each kernel's dims buffer, and
// evaluates each launch's grid (a size term of the dims) and each output's shape (a shape program).

const FORMAT = "nnvm-webgpu-web";
const VERSION = 3; // 1: bound shapes only; 2: also symbolic dims; 3: also read-only bindings and grids folding y
// (web.py writes the lowest version a folder needs)
const FOLD = 65535; // workgroups along x past this fold into y (wgsl.py's FOLD)

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, int16: Int16Array, uint16: Uint16Array,
  int8: Int8Array, uint8: Uint8Array, bool: Uint8Array, float16: Uint16Array,
};

const round4 = (n) => Math.max(4, Math.ceil(n / 4) * 4);

const floorDiv = (a, b) => Math.floor(a / b);
const floorMod = (a, b) => a - b * Math.floor(a / b); // Python's %, as the compiler folds it

// A launch table's size term (gpu/library.py's size_term): an int, ["dim", name] or [op, a, b].
const SIZE_OPS = {
  add: (a, b) => a + b, sub: (a, b) => a - b, mul: (a, b) => a * b, floordiv: floorDiv, floormod: floorMod,
  min: Math.min, max: Math.max,
};

function sizeValue(term, dims) {
  if (typeof term === "number") return term;
  if (term[0] === "dim") return dims[term[1]];
  return SIZE_OPS[term[0]](sizeValue(term[1], dims), sizeValue(term[2], dims));
}

// A shape program (runtime/symbolic.py): postfix words over the dim vector,
// CONST v | DIM k | ADD | SUB | MUL | FLOORDIV | MOD | MIN | MAX.
const PROGRAM_OPS = [null, null, (a, b) => a + b, (a, b) => a - b, (a, b) => a * b, floorDiv, floorMod, Math.min, Math.max];

function evaluate(code, vector) {
  const stack = [];
  for (let k = 0; k < code.length; k++) {
    if (code[k] === 0 || code[k] === 1) {
      stack.push(code[k] === 0 ? code[k + 1] : vector[code[k + 1]]);
      k++;
    } else {
      const b = stack.pop(), a = stack.pop();
      stack.push(PROGRAM_OPS[code[k]](a, b));
    }
  }
  return stack[0];
}

/** The names of the dims a program reads, in order. */
function programNames(code, dims) {
  const names = [];
  for (let k = 0; k < code.length; k += code[k] <= 1 ? 2 : 1) {
    if (code[k] === 1 && !names.includes(dims[code[k + 1]])) names.push(dims[code[k + 1]]);
  }
  return names;
}

const shown = (shape) => `(${shape.join(", ")})`;
const product = (shape) => shape.reduce((a, b) => a * b, 1);

const inputError = (sentence) => new Error(`nnvm: ${sentence}`); // Python's InputError, word for word

/** Each dim's value from the inputs' `shapes` ({name: [sizes]}), checked as Python's DimSignature.bind checks
 * it, with its sentences: rank and static sizes as declared, every dim within its bounds and the same in every
 * input carrying it, a dim the model names by arithmetic (`past + seq`) and the requirements as their programs
 * give them. */
function bindDims(symbolic, shapes) {
  const names = symbolic.dims.map(([d]) => d);
  const bounds = Object.fromEntries(symbolic.dims.map(([d, lo, hi]) => [d, [lo, hi]]));
  const values = {}, source = {}, later = [];
  for (const { name, shape, programs } of symbolic.inputs) {
    const got = shapes[name];
    if (got.length !== shape.length) {
      throw inputError(`input '${name}' must have rank ${shape.length} ${shown(shape)}, got shape [${got.join(", ")}]`);
    }
    shape.forEach((d, axis) => {
      const n = got[axis];
      if (typeof d === "number") {
        if (n !== d) throw inputError(`input '${name}' dim ${axis} must be ${d} ${shown(shape)}, got ${n}`);
      } else if (!(d in bounds)) {
        later.push([name, axis, d, n, programs[axis]]); // `past + seq`: checked once its names are bound
      } else if (d in values) {
        if (n !== values[d]) throw inputError(`input '${name}' dim ${axis} (${d}) is ${n}, but input '${source[d]}' has ${d} = ${values[d]}`);
      } else {
        const [lo, hi] = bounds[d];
        if (n < lo || (hi !== null && n > hi)) {
          throw inputError(`input '${name}' dim ${axis} (${d}) is ${n}, outside its bounds [${lo}, ${hi === null ? "inf" : hi}]`);
        }
        values[d] = n;
        source[d] = name;
      }
    });
  }
  const vector = names.map((d) => values[d] ?? 0);
  const given = (dims) => dims.map((d) => `${d} = ${values[d]} (input '${source[d]}')`).join(", ");
  for (const [name, axis, d, n, code] of later) {
    const want = evaluate(code, vector);
    if (n !== want) throw inputError(`input '${name}' dim ${axis} (${d}) is ${n}, but ${given(programNames(code, names))} make it ${want}`);
  }
  for (const r of symbolic.requirements) {
    const most = evaluate(r.limit, vector);
    if (evaluate(r.dim, vector) > most) {
      const dims = [...new Set([...programNames(r.dim, names), ...programNames(r.limit, names)])];
      throw inputError(`${r.where}: ${r.text} must be at most ${most}, and the inputs give ${given(dims)}`);
    }
  }
  return values;
}

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
  if (manifest.format !== FORMAT || !(manifest.version >= 1 && manifest.version <= VERSION)) {
    throw new Error(`nnvm: ${base} is not an nnvm WebGPU model of version 1 to ${VERSION} (got ${manifest.format} ${manifest.version})`);
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
    this.symbolic = manifest.module.symbolic ?? null;
    const planDims = this.plan.dims ?? {}; // the binding the plan is made for: every dim at its upper bound
    const size = (term) => sizeValue(term, planDims);
    if (this.symbolic) {
      // shapes of ints and dim names (`past + seq` as text); `dims`: each dim's bounds
      this.dims = this.symbolic.dims.map(([name, min, max]) => ({ name, min, max }));
      const dtypes = (list) => Object.fromEntries(list.map((d) => [d.name, d.dtype]));
      const ins = dtypes(this.plan.inputs), outs = this.plan.outputs.map((d) => d.dtype);
      this.inputs = this.symbolic.inputs.map(({ name, shape }) => ({ name, shape, dtype: ins[name] }));
      this.outputs = this.symbolic.outputs.map(({ name, shape }, i) => ({ name, shape, dtype: outs[i] }));
    } else {
      this.dims = [];
      this.inputs = this.plan.inputs.map(({ name, shape, dtype }) => ({ name, shape, dtype }));
      this.outputs = this.plan.outputs.map(({ name, shape, dtype }) => ({ name, shape, dtype }));
    }
    this.weightBytes = weights;
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    this.weights = device.createBuffer({ size: round4(weights.byteLength), usage });
    if (weights.byteLength) device.queue.writeBuffer(this.weights, 0, weights, 0, weights.byteLength & ~3);
    this.arena = device.createBuffer({ size: round4(this.plan.arena_bytes), usage });
    this.module = device.createShaderModule({ code: source });
    this.launches = [];
    this.dimBuffers = new Map(); // the dims a call passes (names joined) -> {names, buffer} of their values
    const pipelines = new Map();
    const functions = new Map(manifest.functions.map((f) => [f.name, f]));
    for (const call of this.plan.calls) {
      const table = functions.get(call.kernel);
      // a call over symbolic dims passes them last, in one int64 buffer (gpu/library.py's split_dim_args)
      const refs = call.args.filter((ref) => !("dim" in ref)), dims = call.args.filter((ref) => "dim" in ref).map((ref) => ref.dim);
      const temporaries = table.temporaries.map((t) => device.createBuffer({ size: round4(size(t.nbytes)), usage }));
      let resources = refs.map((ref, i) => this.#binding(ref, size(table.params[i].nbytes)));
      if (dims.length) resources.push({ buffer: this.#dimBuffer(dims, planDims) });
      resources = resources.concat(temporaries.map((buffer) => ({ buffer })));
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
        const readOnly = launch.read_only ?? [];
        if (!Array.isArray(readOnly) || ![undefined, true, "y"].includes(launch.fold)) {
          throw new Error(`nnvm: kernel ${launch.kernel}: the launch table's fold or read-only bindings are not ones this runtime knows`);
        }
        if (!pipelines.has(launch.kernel)) {
          pipelines.set(launch.kernel, this.#pipeline(launch.kernel, resources.length, readOnly));
        }
        const { pipeline, layout } = pipelines.get(launch.kernel);
        const entries = resources.map((resource, binding) => ({ binding, resource }));
        this.launches.push({ pipeline, group: device.createBindGroup({ layout, entries }), grid: launch.grid,
                             fold: launch.fold ?? false, copies });
      }
    }
  }

  #dimBuffer(names, values) {
    const key = names.join(",");
    if (!this.dimBuffers.has(key)) {
      // COPY_SRC: a kernel with more than 8 buffers reads the dims packed, copied from this one
      const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
      const buffer = this.device.createBuffer({ size: 8 * names.length, usage });
      this.dimBuffers.set(key, { names, buffer });
      this.device.queue.writeBuffer(buffer, 0, BigInt64Array.from(names, (d) => BigInt(values[d])));
    }
    return this.dimBuffers.get(key).buffer;
  }

  #binding(ref, nbytes) {
    if ("arena" in ref) {
      return { buffer: this.arena, offset: ref.arena, size: Math.min(round4(nbytes), round4(this.plan.arena_bytes) - ref.arena) };
    }
    const w = this.manifest.weights[ref.param];
    return { buffer: this.weights, offset: w.offset, size: round4(w.nbytes) };
  }

  // `readOnly`: the bindings the kernel declares var<storage, read> (its dims, which a barrier under its
  // fold's guard needs uniform), as WebGPU requires of the layout
  #pipeline(kernel, count, readOnly) {
    const entries = Array.from({ length: count }, (_, binding) => (
      { binding, visibility: GPUShaderStage.COMPUTE, buffer: { type: readOnly.includes(binding) ? "read-only-storage" : "storage" } }));
    const layout = this.device.createBindGroupLayout({ entries });
    const pipeline = this.device.createComputePipeline({
      layout: this.device.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module: this.module, entryPoint: kernel },
    });
    return { pipeline, layout };
  }

  /** Each input's data and shape from `feeds`, the dims they bind and the outputs' shapes; a wrong input is
   * one sentence naming it (and the dim). */
  #bind(feeds) {
    const given = {}, shapes = {};
    for (const d of this.inputs) {
      const value = feeds[d.name];
      if (value === undefined) throw new Error(`nnvm: no value for the input ${d.name}`);
      const isArray = ArrayBuffer.isView(value);
      if (!isArray && !(value && ArrayBuffer.isView(value.data) && Array.isArray(value.shape))) {
        throw new Error(`nnvm: the input ${d.name} must be a typed array or {data, shape}`);
      }
      const fixed = d.shape.every((n) => typeof n === "number");
      if (isArray && !fixed) {
        throw new Error(`nnvm: the input ${d.name} has symbolic dims ${shown(d.shape)}: give it as {data, shape}`);
      }
      given[d.name] = isArray ? value : value.data;
      shapes[d.name] = isArray ? d.shape : value.shape.map(Number);
    }
    let values = {}, outShapes = this.outputs.map((d) => d.shape);
    if (this.symbolic) {
      values = bindDims(this.symbolic, shapes);
      const vector = this.symbolic.dims.map(([d]) => values[d] ?? 0);
      outShapes = this.symbolic.outputs.map(({ programs }) => programs.map((code) => evaluate(code, vector)));
    } else {
      for (const d of this.inputs) {
        const got = shapes[d.name];
        if (got.length !== d.shape.length || got.some((n, i) => n !== d.shape[i])) {
          throw new Error(`nnvm: the input ${d.name} must have shape [${d.shape}], got [${got}]`);
        }
      }
    }
    for (const d of this.inputs) {
      const value = given[d.name], count = product(shapes[d.name]), Type = ARRAYS[d.dtype];
      if (!(value instanceof Type) || value.length !== count) {
        throw new Error(`nnvm: the input ${d.name} must be a ${Type.name} of ${count} elements (shape [${shapes[d.name]}])`);
      }
      if (value instanceof BigInt64Array || value instanceof BigUint64Array) {
        // WGSL computes 64-bit integers in 32 bits: a value beyond them would give a wrong answer
        const lo = value instanceof BigInt64Array ? -(2n ** 31n) : 0n, hi = value instanceof BigInt64Array ? 2n ** 31n - 1n : 2n ** 32n - 1n;
        for (const v of value) {
          if (v < lo || v > hi) throw new Error(`nnvm: the input ${d.name} holds ${v}, beyond the 32 bits WebGPU computes ${d.dtype} in`);
        }
      }
    }
    return { given, values, outShapes };
  }

  /** Run on `feeds` ({name: TypedArray}, or {name: {data, shape}} for an input with symbolic dims); resolves
   * to the outputs, typed arrays in the plan's order, each with its `shape`. */
  async run(feeds) {
    const device = this.device;
    const { given, values, outShapes } = this.#bind(feeds);
    const grids = this.launches.map(({ grid, fold }) => {
      const g = this.symbolic ? grid.map((t) => Math.max(sizeValue(t, values), 1)) : grid;
      // a grid of the dims past 65535 workgroups along one axis, folded into the next (wgsl.py's fold_at_run)
      if (fold === "y") return g[1] > FOLD ? [g[0], FOLD, Math.ceil(g[1] / FOLD)] : g;
      return fold && g[0] > FOLD ? [FOLD, Math.ceil(g[0] / FOLD), 1] : g;
    });
    const most = device.limits.maxComputeWorkgroupsPerDimension;
    const widest = Math.max(...grids.flat());
    if (widest > most) {
      throw new Error(`nnvm: these input shapes need ${widest} workgroups along one axis, more than this WebGPU device allows (${most}); use smaller inputs`);
    }
    // Nothing below awaits before the submit: a run's writes and its command buffer are queued together.
    for (const { names, buffer } of this.dimBuffers.values()) {
      if (this.symbolic) device.queue.writeBuffer(buffer, 0, BigInt64Array.from(names, (d) => BigInt(values[d])));
    }
    for (const d of this.plan.inputs) {
      const value = given[d.name];
      if (!("arena" in d.ref) || value.byteLength === 0) continue;
      const bytes = new Uint8Array(round4(value.byteLength));
      bytes.set(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
      device.queue.writeBuffer(this.arena, d.ref.arena, bytes);
    }
    // a command WebGPU refuses makes the whole submit do nothing: an error, never outputs left at zero
    device.pushErrorScope("validation");
    const encoder = device.createCommandEncoder();
    let pass = null;
    this.launches.forEach(({ pipeline, group, copies }, k) => {
      if (copies.length && pass) { pass.end(); pass = null; } // copies go between passes
      for (const copy of copies) encoder.copyBufferToBuffer(...copy);
      pass ??= encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(grids[k][0], grids[k][1], grids[k][2]);
    });
    pass?.end();
    const nbytes = this.plan.outputs.map((d, i) => product(outShapes[i]) * ARRAYS[d.dtype].BYTES_PER_ELEMENT);
    const reads = this.plan.outputs.map((d, i) => {
      if (!("arena" in d.ref)) return null;
      const staging = device.createBuffer({ size: round4(nbytes[i]), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      encoder.copyBufferToBuffer(this.arena, d.ref.arena, staging, 0, round4(nbytes[i]));
      return staging;
    });
    device.queue.submit([encoder.finish()]);
    const refused = await device.popErrorScope();
    if (refused) throw new Error(`nnvm: WebGPU refused the run: ${refused.message.trim().split("\n")[0]}`);
    return await Promise.all(this.plan.outputs.map(async (d, i) => {
      const Type = ARRAYS[d.dtype];
      let out;
      if (reads[i] === null) {
        const w = this.manifest.weights[d.ref.param];
        out = new Type(this.weightBytes.slice(w.offset, w.offset + w.nbytes));
      } else {
        await reads[i].mapAsync(GPUMapMode.READ);
        out = new Type(reads[i].getMappedRange().slice(0, nbytes[i]));
        reads[i].unmap();
        reads[i].destroy();
      }
      out.shape = outShapes[i];
      return out;
    }));
  }
}
