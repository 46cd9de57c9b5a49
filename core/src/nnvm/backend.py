"""What a backend plugin registers: a class that compiles loop programs for some target kinds.

The kernel calling convention every backend follows: a kernel named ``name`` is a C function
``int32_t name(void **args)`` whose ``args[k]`` is the data pointer of the k-th parameter buffer of
the ``PrimFunc`` (row-major, contiguous). It returns 0 on success. This is what the core's graph
executor calls, in-process or after ``nnvm.load`` of an exported file.
"""

from __future__ import annotations

from dataclasses import dataclass

from nnvm.target import Target


class KernelLibrary:
    """Compiled kernels in memory. Backends subclass this."""

    def address(self, name: str) -> int:
        """The address of kernel ``name`` (see the calling convention above)."""
        raise NotImplementedError

    def export(self, path: str, blobs: dict) -> None:
        """Write one deployable file holding the kernels plus named byte ``blobs`` (graph, weights).

        For native code this is a shared library exporting ``nnvm_blob_<name>`` (bytes) and
        ``nnvm_blob_<name>_size`` (uint64) for each blob, readable by ``nnvm.runtime.load``.
        """
        raise NotImplementedError

    def stats(self) -> dict:
        """Backend-specific entries for ``mod.stats()`` (and ``nnvm compile --stats --json``), such as the
        registers and spills per kernel a GPU compiler reports. Empty by default."""
        return {}

    def source(self) -> str:
        """Human-readable generated code (LLVM IR, OpenCL C, ...), for ``--dump-ir``."""
        return ""

    def device_module(self, plan: dict, params: dict):
        """For kernels on a device with its own memory (GPUs): an object whose ``run(values)`` runs the
        whole ``plan`` there (weights uploaded once, activations on the device) and returns the outputs;
        ``Module.run`` then hands every run to it. None (the default): kernels are called with host
        pointers. ``nnvm.gpu.library.GPUKernelLibrary`` implements it for every GPU backend."""
        return None

    def sequence_runner(self) -> int | None:
        """The address of a C function ``int32_t run(int64_t n, void *const *kernels, void *const *args,
        int64_t *failed)`` that calls ``kernels[k](args[k])`` in order and returns the first nonzero status
        (its index in ``*failed``), or 0: ``Module.run`` then makes one foreign call a run instead of one a
        kernel. None (the default): the runtime calls each kernel itself."""
        return None

    def runs_in_process(self) -> bool:
        """False when this process cannot execute the code (built for another CPU). ``Module.run`` then
        exports the module once to a temporary file and hands it to ``run_exported``."""
        return True

    def run_exported(self, path: str, inputs: list, outputs: list) -> list:
        """Run the exported module ``path`` in another process (an emulator, a device runtime) on
        ``inputs`` (arrays in the plan's input order); ``outputs`` are the plan's output descriptions.
        Returns the output arrays. Needed only when ``runs_in_process()`` is False."""
        raise NotImplementedError

    def time_kernel(self, name: str, arrays: list, repeat: int, min_repeat_ms: float) -> list[float]:
        """Seconds per call of kernel ``name`` on ``arrays`` in each of ``repeat`` rounds of about
        ``min_repeat_ms``, timed out of process (under an emulator): the tuner's measuring step for a
        library whose ``runs_in_process()`` is False. Its times are the emulator's, never the device's."""
        raise NotImplementedError

    def emulation_note(self) -> str:
        """One line ``Module.run`` prints on stderr, once, before running out of process."""
        return "this host cannot run the module's code in process; running it in another process"


@dataclass(frozen=True)
class NativeTarget:
    """What the C runtime (``nnvm runtime build``), the export footer and the loaders need of a target
    whose modules are ELF shared libraries of some CPU: the C compiler that builds for it (a cross
    compiler off that CPU), its ELF machine and class (the runtime refuses other CPUs' modules by
    them), a name for messages, and the command prefix that runs its executables on this host (an
    emulator such as ``qemu-riscv64 -L /usr/riscv64-linux-gnu``; empty where they run natively)."""

    kind: str  # the target kind (``llvm``, ``riscv64``): the runtime serves modules of this kind
    cc: str
    elf_machine: int  # e_machine (62 x86-64, 183 aarch64, 40 arm, 243 RISC-V)
    elf_class: int  # 1: 32-bit, 2: 64-bit
    machine_name: str  # for messages: "x86-64", "RISC-V"
    emulator: tuple = ()


class Backend:
    """A code generator. ``name`` is shown by ``nnvm plugins``; ``target_kinds`` are target names.

    Every backend declares its target facts, which the core derives everything target-specific from
    (it holds no table of targets): ``keys``, what shared schedule layers serve its targets by
    (``("cpu",)``: the CPU layer ``nnvm.cpu``; ``("gpu",)``: the GPU layer ``nnvm.gpu``; a key of your
    own serves only what registers for it), and ``device``, where its kernels run (``"cpu"``: on host
    memory; ``"gpu"``: a device with memory of its own). Registration refuses a backend declaring
    none. Whether the C runtime serves a target, and with which compiler and emulator, is
    ``native_target``."""

    name: str = "?"
    target_kinds: tuple = ()
    keys: tuple = ()  # ("cpu",) or ("gpu",), or keys of your own: ``Target.keys``
    device: str = ""  # "cpu" or "gpu"
    # dtypes the hardware has no type for (Metal: float64). Compiling one is an error naming the kernel;
    # the conformance suite runs only the examples without them and says how many it left out.
    unsupported_dtypes: tuple = ()

    def check_target(self, target: Target) -> None:
        """Raise ``TargetError`` for options this backend does not understand."""

    def native_target(self, target: Target) -> NativeTarget | None:
        """The CPU facts of ``target`` when its exported modules are ELF shared libraries the C runtime
        (``nnvm runtime build --target``) runs: compiler, ELF machine and class, emulator. None (the
        default): the C runtime does not serve this target."""
        return None

    def build(self, funcs: list, target: Target) -> KernelLibrary:
        """Compile ``PrimFunc``s into one ``KernelLibrary``."""
        raise NotImplementedError

    # -- kernels one at a time: what the kernel cache and parallel compiles need --------------------------
    def kernel_identity(self, target: Target) -> str | None:
        """Everything besides the loop program that decides this backend's code for ``target`` (resolved
        CPU and features, the code generator's version and source hash), as a string that goes into
        every kernel's cache key. None (the default): this backend compiles a model's kernels together
        in ``build``, with no cache and no parallel compile; a string opts into ``compile_kernel`` and
        ``link_kernels``."""
        return None

    def compile_kernel(self, func, target: Target) -> bytes:
        """One ``PrimFunc`` compiled on its own into bytes that ``link_kernels`` accepts in any later
        process with the same ``kernel_identity`` (the kernel cache stores them as they are). Called in
        worker processes too, so it must not rely on state built by an earlier call."""
        raise NotImplementedError

    def link_kernels(self, kernels: list, target: Target) -> KernelLibrary:
        """One ``KernelLibrary`` from ``compile_kernel``'s outputs (a list of bytes): the same library
        ``build`` would make from their ``PrimFunc``s."""
        raise NotImplementedError

    def default_tuning_logs(self, target: Target) -> list:
        """Paths of the tuning logs this backend ships for ``target`` (TVM's TopHub), consulted by the
        compiler after any log the user gives; their records apply where their CPU signature fits the
        target's (``cpu_signature``). None by default."""
        return []

    def cpu_signature(self, target: Target):
        """The ``nnvm.autotune.signature.CPUSignature`` of ``target`` (what decides a schedule: vector
        width, FMA, features, cores, caches), which tuning logs are matched against and which ``nnvm
        tune`` writes into its records; None (the default) applies every log's records unchecked."""
        return None

    def tensor_intrinsics(self, target: Target) -> dict:
        """Tensor intrinsics this backend implements for ``target``, for ``Stage.tensorize``: a dict
        from name to a function of keyword parameters returning a ``nnvm.te.tensorize.TensorIntrin``
        (``te.backend_intrinsic(target, name, **params)`` calls it). None by default."""
        return {}

    def host_can_run(self, target: Target) -> bool:
        """Whether kernels for ``target`` execute in this process (False: an emulator is needed)."""
        return True

    # -- what the CPU schedule layer (``nnvm.cpu``, target key ``cpu``) asks ------------------------------
    def vector_lanes(self, target: Target) -> int | None:
        """float32 lanes of the widest vector unit ``target`` has (16 with AVX-512, 8 with AVX2, 4 with
        NEON or SSE): the CPU templates size register tiles and layout blocks with it. None (the
        default): this backend does not take the CPU templates; answering a width is how a CPU backend
        opts in, since the layer cannot guess an ISA it knows nothing about."""
        return None

    def vector_registers(self, target: Target) -> int:
        """Vector registers ``target`` has (16 ymm with AVX2, 32 zmm with AVX-512, v0-v31 on AArch64):
        the CPU templates' register tiles (accumulators and the operands held across a step) must fit
        in them or LLVM spills. 16 by default: a tile sized for 16 runs on a larger file, one sized for
        32 spills on a smaller one."""
        return 16

    def broadcast_operand(self, target: Target) -> bool:
        """Whether a vector multiply-add on ``target`` takes its broadcast input from memory or from a
        lane (AVX-512's embedded broadcast, ``{1to16}``; AArch64's by-element ``fmla``), so a broadcast
        holds no register of its own: the CPU layer's cost model counts registers and the latency
        floor of a step by it. False by default (AVX2's accounting: each broadcast a ``vbroadcastss``
        into a register), which never overfills the register file."""
        return False

    def blocked_layout(self, target: Target) -> bool:
        """Whether the CPU layer's layout pass runs for ``target``: conv2d in ``NCHW[x]c`` (x the vector
        lanes) and dense over a packed weight, which its blocked templates then schedule. Off by default:
        it pays where those templates were measured faster than the plain NCHW ones (x86)."""
        return False

    def open_foreign(self, path: str) -> KernelLibrary | None:
        """For ``nnvm.load`` of an exported file this host cannot load (another CPU's shared library): a
        ``KernelLibrary`` with ``blob(name)`` (the bytes of ``nnvm_blob_<name>``) that runs out of
        process, or None when the file is not this backend's. Asked of every backend in turn."""
        return None
