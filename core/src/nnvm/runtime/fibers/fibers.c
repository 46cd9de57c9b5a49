/* See fibers.h. One launch runs its blocks one after another on the calling OS thread; within a
 * block every GPU thread is a fiber with its own stack, switched to in turn (forward or reversed),
 * each running until its next barrier or its end. After a round every fiber must be in the same
 * state (all at a barrier, or all done): anything else is a divergent barrier.
 *
 * A fiber starts with swapcontext (ucontext sets up its stack) but every later switch, at barriers
 * and at the end, is _setjmp/_longjmp: no signal-mask system call, so a barrier costs tens of
 * nanoseconds per thread instead of hundreds. */
#define _GNU_SOURCE
#undef _FORTIFY_SOURCE /* longjmp onto another stack is the point here, not a bug to catch */
#include "fibers.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

__thread nnvm_dim3 nnvm_thread_idx, nnvm_block_idx, nnvm_block_dim, nnvm_grid_dim;

enum { RUNNING = 0, AT_BARRIER = 1, DONE = 2 };

typedef struct {
  nnvm_thread_fn fn;
  void **args;
  ucontext_t main;
  jmp_buf main_jb;    /* the scheduler, saved before every resume */
  ucontext_t *ctx;    /* for starting a fiber */
  jmp_buf *jb;        /* a fiber waiting at a barrier */
  unsigned char *state;
  unsigned current;
  int in_fibers;      /* inside a fiber launch (a barrier is legal) */
  int bad_barrier;    /* a barrier was reached in a launch without fibers */
} launch_state;

static __thread launch_state *active;

static void set_thread(unsigned linear) {
  nnvm_thread_idx.x = linear % nnvm_block_dim.x;
  nnvm_thread_idx.y = (linear / nnvm_block_dim.x) % nnvm_block_dim.y;
  nnvm_thread_idx.z = linear / (nnvm_block_dim.x * nnvm_block_dim.y);
}

void nnvm_fibers_barrier(void) {
  launch_state *L = active;
  if (L == NULL || !L->in_fibers) {
    if (L) L->bad_barrier = 1;
    return;
  }
  unsigned me = L->current;
  L->state[me] = AT_BARRIER;
  if (!_setjmp(L->jb[me])) _longjmp(L->main_jb, 1);
}

static void fiber_main(void) {
  launch_state *L = active;
  unsigned me = L->current;
  L->fn(L->args);
  L->state[me] = DONE;
  _longjmp(L->main_jb, 1);
}

static void describe(char *err, int err_len, const char *what, unsigned linear) {
  set_thread(linear);
  snprintf(err, (size_t)err_len, "%s (block (%u, %u, %u), thread (%u, %u, %u))", what, nnvm_block_idx.x,
           nnvm_block_idx.y, nnvm_block_idx.z, nnvm_thread_idx.x, nnvm_thread_idx.y, nnvm_thread_idx.z);
}

static int run_block_fibers(launch_state *L, unsigned n, int reversed, unsigned char *stacks, char *err,
                            int err_len) {
  ucontext_t start;
  getcontext(&start);
  for (unsigned t = 0; t < n; t++) {
    L->ctx[t] = start;
    L->ctx[t].uc_stack.ss_sp = stacks + (size_t)t * NNVM_FIBER_STACK;
    L->ctx[t].uc_stack.ss_size = NNVM_FIBER_STACK;
    L->ctx[t].uc_link = NULL; /* fibers end by _longjmp to the scheduler */
    makecontext(&L->ctx[t], fiber_main, 0);
  }
  for (unsigned round = 0;; round++) {
    for (unsigned k = 0; k < n; k++) {
      unsigned t = reversed ? n - 1 - k : k;
      L->current = t;
      set_thread(t);
      L->state[t] = RUNNING;
      if (!_setjmp(L->main_jb)) {
        if (round == 0) swapcontext(&L->main, &L->ctx[t]);
        else _longjmp(L->jb[t], 1);
      }
    }
    unsigned at_barrier = 0;
    for (unsigned t = 0; t < n; t++) at_barrier += L->state[t] == AT_BARRIER;
    if (at_barrier == 0) return 0;
    if (at_barrier != n) {
      unsigned waiting = 0, finished = 0;
      for (unsigned t = 0; t < n; t++) {
        if (L->state[t] == AT_BARRIER) waiting = t; else finished = t;
      }
      char what[160];
      snprintf(what, sizeof what, "divergent barrier: %u of %u threads wait at barrier %u while thread %u "
               "has finished", at_barrier, n, round + 1, finished);
      describe(err, err_len, what, waiting);
      return -1;
    }
  }
}

int nnvm_fibers_launch(nnvm_thread_fn fn, void **args, const unsigned grid[3], const unsigned block[3],
                       int reversed, int fibers, char *err, int err_len) {
  launch_state L;
  memset(&L, 0, sizeof L);
  L.fn = fn;
  L.args = args;
  L.in_fibers = fibers;
  unsigned n = block[0] * block[1] * block[2];
  unsigned char *stacks = NULL;
  size_t stack_bytes = (size_t)n * NNVM_FIBER_STACK;
  if (fibers && n > 0) {
    stacks = mmap(NULL, stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                  -1, 0);
    L.ctx = calloc(n, sizeof(ucontext_t));
    L.jb = calloc(n, sizeof(jmp_buf));
    L.state = calloc(n, 1);
    if (stacks == MAP_FAILED || !L.ctx || !L.jb || !L.state) {
      snprintf(err, (size_t)err_len, "out of memory for %u fiber stacks", n);
      if (stacks != MAP_FAILED) munmap(stacks, stack_bytes);
      free(L.ctx);
      free(L.jb);
      free(L.state);
      return -1;
    }
  }
  launch_state *outer = active;
  active = &L;
  nnvm_grid_dim = (nnvm_dim3){grid[0], grid[1], grid[2]};
  nnvm_block_dim = (nnvm_dim3){block[0], block[1], block[2]};
  int rc = 0;
  unsigned blocks = grid[0] * grid[1] * grid[2];
  for (unsigned b = 0; b < blocks && rc == 0; b++) {
    nnvm_block_idx.x = b % grid[0];
    nnvm_block_idx.y = (b / grid[0]) % grid[1];
    nnvm_block_idx.z = b / (grid[0] * grid[1]);
    if (fibers) {
      rc = run_block_fibers(&L, n, reversed, stacks, err, err_len);
    } else {
      for (unsigned k = 0; k < n; k++) {
        set_thread(reversed ? n - 1 - k : k);
        fn(args);
      }
      if (L.bad_barrier) {
        describe(err, err_len, "a barrier was reached in a kernel launched without fibers", 0);
        rc = -1;
      }
    }
  }
  active = outer;
  if (stacks) munmap(stacks, stack_bytes);
  free(L.ctx);
  free(L.jb);
  free(L.state);
  return rc;
}
