/* Runs a GPU kernel's threads on one CPU thread: the language-neutral part of executing CUDA (or Metal)
 * source on the host. A kernel is compiled as host code into a function running ONE GPU thread,
 * `void thread(void **args)`, which reads its indices from the variables below. The runner calls it
 * for every thread of every block. Kernels with barriers run each GPU thread as a fiber (ucontext):
 * a barrier switches to the next fiber, so a block advances round by round between barriers, and a
 * barrier reached by only some threads of a block is reported as an error instead of hanging. */
#ifndef NNVM_FIBERS_H
#define NNVM_FIBERS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { unsigned x, y, z; } nnvm_dim3;

/* The running GPU thread's indices and the launch's sizes (one set per OS thread). */
extern __thread nnvm_dim3 nnvm_thread_idx, nnvm_block_idx, nnvm_block_dim, nnvm_grid_dim;

typedef void (*nnvm_thread_fn)(void **args);

/* Run `fn` for every thread of `grid` x `block`. `reversed`: threads of a block in reverse order
 * (a missing barrier then shows up as wrong numbers); `fibers`: 0 when the kernel has no barrier
 * (each thread runs to completion), else one fiber per thread. Returns 0, or -1 with a sentence in
 * `err` (a divergent barrier, a barrier in a kernel launched without fibers, out of memory). */
int nnvm_fibers_launch(nnvm_thread_fn fn, void **args, const unsigned grid[3], const unsigned block[3],
                       int reversed, int fibers, char *err, int err_len);

/* The barrier (`__syncthreads()`, `threadgroup_barrier`): called from inside a GPU thread. */
void nnvm_fibers_barrier(void);

/* Bytes of stack per fiber (private arrays of a GPU thread live there). */
#define NNVM_FIBER_STACK (256 * 1024)

#ifdef __cplusplus
}
#endif
#endif
