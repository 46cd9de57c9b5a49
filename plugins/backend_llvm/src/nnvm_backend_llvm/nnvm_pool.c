/* nnvm_pool.c: the thread pool that parallel loops of LLVM-compiled kernels run on (x86 and Arm).
 *
 * Built by library.py: once per machine into a shared library the JIT resolves against, and into every
 * exported module (hidden symbols: each module carries its own pool, so it needs nothing but libc).
 *
 * Why not libgomp: GOMP_parallel gives each thread one static chunk and its join waits for every team
 * thread, so on a loaded machine each parallel region waits for the worker the OS descheduled. Here:
 * - a loop is cut into more chunks than threads (CHUNKS_PER_THREAD); each team thread owns a contiguous
 *   run of them (the caller the first), takes its own front first from an atomic counter of its own,
 *   then takes what is left of the others' the same way; the region ends when every chunk is *done*, so
 *   a worker that wakes late finds nothing left and goes back to waiting. Owning a run keeps a thread on
 *   the same part of every loop, so the next kernel finds in its own L2 what this one wrote there
 *   (the same channel blocks, rows, images): ShuffleNet b1 2.86 against 3.25 ms with one shared
 *   counter, whose chunks alternate between the threads (bench/RESULTS.md, session 15). Chunks are the
 *   same size where a few more of them make it so (even_chunks).
 *   A worker can never take a chunk of a later job: each counter carries the job's generation
 *   (generation << 32 | next chunk), and the job's fields are read like a seqlock (checked against
 *   `ticket`, generation << 32 | open, after reading);
 * - spinning is bounded: workers spin SPIN_NS after a job before sleeping on a futex, the caller spins
 *   SPIN_NS for the last chunks before sleeping; a sleeper is woken only when someone sleeps;
 * - one job at a time: a second thread calling while a job is in flight runs its loop on its own
 *   thread (correct, and no two teams fighting over the same cores);
 * - fork: a child forked after the workers started has none of them, so it runs loops serially;
 * - unloading (dlclose of an exported module): a destructor stops and joins the workers.
 *
 * Environment: the pool reads NNVM_NUM_THREADS (nnvm_pool_team) and NNVM_POOL_AFFINITY (start_workers)
 * itself, the only NNVM_* reads outside nnvm/environment.py (which lists them, as the README does): an
 * exported module runs this pool under the C runtime with no Python in the process, where nothing could
 * pass them in. Under Python, nnvm.runtime.threads sets NNVM_NUM_THREADS before the first kernel runs and
 * refuses an NNVM_POOL_AFFINITY other than 0 or 1, so both read the same either way.
 *
 * API (what the generated code calls):
 *   void nnvm_pool_run(void (*fn)(void *closure, int64_t lo, int64_t hi), void *closure, int64_t extent,
 *                      int32_t team): fn over [0, extent) in chunks, on at most `team` threads;
 *   int32_t nnvm_pool_team(int32_t *cache): the team size, computed once into *cache (NNVM_NUM_THREADS,
 *                      else OMP_NUM_THREADS, else the CPUs this process may use); 1 in a forked child.
 *   void *nnvm_scratch_alloc(size_t bytes), void nnvm_scratch_free(void *): a kernel's buffers too big for
 *                      its stack (codegen.py's Allocate), 64-byte aligned, NULL when out of memory.
 *   int32_t nnvm_run_kernels(int64_t n, void *const *kernels, void *const *args, int64_t *failed): what the
 *                      Python runtime calls once a run (KernelLibrary.sequence_runner) instead of each
 *                      kernel through ctypes (~0.5 us a call: 30 us of MobileNetV2's 4.4 ms at batch 1).
 *
 * Scratch buffers are kept for the next call, per thread: a thread's freed buffers (SCRATCH_SLOTS of
 * them, the largest) go to a cache of its own, and an allocation takes the smallest cached one that is
 * big enough. Without it every call of a kernel with a big pad or Winograd buffer asks malloc again, and
 * malloc maps fresh pages (each faulted in and zeroed) for a block above its mmap threshold: glibc's
 * threshold follows the blocks freed up to 32 MiB, musl's and others' do not move. Per thread, so
 * threads that call one module at once (or the pool's workers in one parallel loop) never share a
 * buffer, with no lock on the way; a thread's cache is freed when it exits, every cache when the
 * library is unloaded (dlclose of an exported module), the calling threads' kernels done.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef NNVM_POOL_API /* the JIT's shared build defines it as default visibility */
#define NNVM_POOL_API __attribute__((visibility("hidden")))
#endif
#ifndef CHUNKS_PER_THREAD
#define CHUNKS_PER_THREAD 4 /* 1 is libgomp's split; 4: a descheduled thread holds an eighth of 2 threads' work */
#endif
#ifndef EVEN_SPLIT_MAX
#define EVEN_SPLIT_MAX 4 /* even_chunks: up to 4x CHUNKS_PER_THREAD chunks (1: never more) */
#endif
#ifndef SPIN_NS
#define SPIN_NS 50000 /* longer than the gap between two kernels' parallel loops (bench/RESULTS.md) */
#endif
#ifndef SCRATCH_SLOTS
#define SCRATCH_SLOTS 4 /* buffers a thread keeps: a kernel has at most three big ones live at once */
#endif
#define SCRATCH_KEEP_MAX ((uint64_t)1 << 31) /* bigger buffers go back to malloc at once */
#define SCRATCH_HEADER 64                   /* before each buffer: its capacity (keeps 64-byte alignment) */
#define MAX_WORKERS 255
#define CLOSED 0xffffffffu /* ticket's chunk field while a job is being written */

typedef void (*nnvm_task)(void *closure, int64_t lo, int64_t hi);

static struct {
  pthread_mutex_t lock; /* starting and stopping workers */
  pthread_t workers[MAX_WORKERS];
  int nworkers;
  pid_t owner;              /* the process the workers belong to */
  atomic_int forked;        /* this is a child forked after the workers started: run serially */
  atomic_int busy;          /* a job is in flight; other callers run serially */
  atomic_int stop;          /* workers exit (library unloaded) */
  atomic_uint gen;          /* job generation; idle workers sleep on it */
  atomic_int sleepers;      /* workers asleep on gen */
  atomic_uint start_gen;    /* gen when the newest workers started */
  _Atomic uint64_t ticket;  /* gen << 32 | 0 once the job is open (CLOSED while it is written) */
  _Atomic(nnvm_task) fn;    /* the job: written between closing and opening the ticket */
  _Atomic(void *) closure;
  _Atomic int64_t extent;
  atomic_uint nchunks;
  atomic_int team;
  atomic_int slots;         /* chunk runs: one a team thread, or 1 (NNVM_POOL_AFFINITY=0) */
  atomic_uint done;         /* chunks finished; the caller sleeps on it */
  atomic_int caller_asleep;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void futex_wait(void *word, unsigned value) {
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
}

static void futex_wake(void *word, int count) {
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}

/* Each team slot's chunks: slot v (the caller 0, worker k k+1) owns chunks [n*v/slots, n*(v+1)/slots),
 * taken front first through its own counter (gen << 32 | next chunk), by itself first and by the others
 * once theirs are done. */
static struct {
  _Alignas(64) _Atomic uint64_t next;
} SLOT[MAX_WORKERS + 1];

/* NNVM_POOL_AFFINITY=0: one counter for all (slots = 1), chunks first come first served; read when the
 * workers start */
static atomic_int affinity = 1;

/* The first chunk slot v owns of n (slot `slots` is n: one past the last slot's run). */
static uint32_t slot_first(uint32_t n, int v, int slots) {
  return (uint32_t)((uint64_t)n * (uint32_t)v / (uint32_t)slots);
}

static int take(uint32_t g, int v, uint32_t hi, uint32_t *k) {
  uint64_t t = atomic_load_explicit(&SLOT[v].next, memory_order_relaxed);
  while ((uint32_t)(t >> 32) == g && (uint32_t)t < hi) {
    if (atomic_compare_exchange_weak_explicit(&SLOT[v].next, &t, t + 1, memory_order_acq_rel,
                                              memory_order_relaxed)) {
      *k = (uint32_t)t;
      return 1;
    }
  }
  return 0;
}

/* Run chunks of job `g` until none is left. `index` is a worker's number (-1: the caller); workers
 * beyond the job's team stay out. */
static void work(uint32_t g, int index) {
  uint64_t t = atomic_load_explicit(&P.ticket, memory_order_acquire);
  if ((uint32_t)(t >> 32) != g || (uint32_t)t == CLOSED) return;
  nnvm_task fn = atomic_load_explicit(&P.fn, memory_order_relaxed);
  void *closure = atomic_load_explicit(&P.closure, memory_order_relaxed);
  int64_t extent = atomic_load_explicit(&P.extent, memory_order_relaxed);
  uint32_t n = atomic_load_explicit(&P.nchunks, memory_order_relaxed);
  int team = atomic_load_explicit(&P.team, memory_order_relaxed);
  int slots = atomic_load_explicit(&P.slots, memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  t = atomic_load_explicit(&P.ticket, memory_order_relaxed);
  if ((uint32_t)(t >> 32) != g || (uint32_t)t == CLOSED) return; /* a later job overwrote what we read */
  if (index >= team - 1) return;
  int self = (index + 1) % slots;
  for (int d = 0; d < slots; d++) {
    int v = (self + d) % slots;
    uint32_t hi = slot_first(n, v + 1, slots);
    uint32_t k;
    while (take(g, v, hi, &k)) {
      fn(closure, extent * k / n, extent * (k + 1) / n);
      if (atomic_fetch_add(&P.done, 1) + 1 == n && atomic_load(&P.caller_asleep)) futex_wake(&P.done, 1);
    }
  }
}

static void *worker_main(void *arg) {
  int index = (int)(intptr_t)arg;
  uint32_t seen = atomic_load(&P.start_gen);
  for (;;) {
    uint32_t g = atomic_load_explicit(&P.gen, memory_order_acquire);
    uint64_t until = 0;
    for (unsigned spins = 0; g == seen; spins++) { /* spin a while, then sleep */
      relax();
      if ((spins & 63) == 63) {
        uint64_t now = now_ns();
        if (!until) until = now + SPIN_NS;
        if (now >= until) {
          atomic_fetch_add(&P.sleepers, 1);
          if (atomic_load(&P.gen) == seen) futex_wait(&P.gen, seen);
          atomic_fetch_sub(&P.sleepers, 1);
        }
      }
      g = atomic_load_explicit(&P.gen, memory_order_acquire);
    }
    if (atomic_load(&P.stop)) return NULL;
    seen = g;
    work(g, index);
  }
}

/* -- scratch buffers ------------------------------------------------------------------------------ */
struct scratch_cache {
  void *block[SCRATCH_SLOTS]; /* malloc'd blocks (header first), NULL: empty slot */
  uint64_t size[SCRATCH_SLOTS];
  struct scratch_cache *prev, *next; /* every thread's cache, so unloading frees them all */
};

static struct {
  pthread_once_t once;
  pthread_key_t key;
  int key_ok;
  pthread_mutex_t lock; /* the list of caches */
  struct scratch_cache *all;
} SC = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static void scratch_drop(struct scratch_cache *c) { /* SC.lock held */
  for (int k = 0; k < SCRATCH_SLOTS; k++) free(c->block[k]);
  if (c->prev) c->prev->next = c->next; else SC.all = c->next;
  if (c->next) c->next->prev = c->prev;
  free(c);
}

static void scratch_thread_exit(void *c) {
  pthread_mutex_lock(&SC.lock);
  scratch_drop(c);
  pthread_mutex_unlock(&SC.lock);
}

static void after_fork_in_child(void);
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void register_fork_handler(void);

static void scratch_key_create(void) {
  pthread_once(&fork_once, register_fork_handler);
  SC.key_ok = pthread_key_create(&SC.key, scratch_thread_exit) == 0;
}

/* This thread's cache, made on first use; NULL if it cannot be (then buffers are not kept). */
static struct scratch_cache *scratch_cache(void) {
  pthread_once(&SC.once, scratch_key_create);
  if (!SC.key_ok) return NULL;
  struct scratch_cache *c = pthread_getspecific(SC.key);
  if (c || !(c = calloc(1, sizeof *c))) return c;
  if (pthread_setspecific(SC.key, c) != 0) {
    free(c);
    return NULL;
  }
  pthread_mutex_lock(&SC.lock);
  c->next = SC.all;
  if (SC.all) SC.all->prev = c;
  SC.all = c;
  pthread_mutex_unlock(&SC.lock);
  return c;
}

NNVM_POOL_API void *nnvm_scratch_alloc(size_t bytes) {
  uint64_t size = bytes ? ((uint64_t)bytes + 63) & ~(uint64_t)63 : 64;
  struct scratch_cache *c = scratch_cache();
  if (c) { /* the smallest kept buffer that is big enough */
    int best = -1;
    for (int k = 0; k < SCRATCH_SLOTS; k++)
      if (c->block[k] && c->size[k] >= size && (best < 0 || c->size[k] < c->size[best])) best = k;
    if (best >= 0) {
      unsigned char *block = c->block[best];
      c->block[best] = NULL;
      return block + SCRATCH_HEADER;
    }
  }
  if (size > SIZE_MAX - SCRATCH_HEADER) return NULL;
  unsigned char *block = aligned_alloc(64, (size_t)(size + SCRATCH_HEADER));
  if (!block) return NULL;
  *(uint64_t *)block = size;
  return block + SCRATCH_HEADER;
}

NNVM_POOL_API void nnvm_scratch_free(void *ptr) {
  if (!ptr) return;
  unsigned char *block = (unsigned char *)ptr - SCRATCH_HEADER;
  uint64_t size = *(uint64_t *)block;
  struct scratch_cache *c = size <= SCRATCH_KEEP_MAX ? scratch_cache() : NULL;
  if (!c) {
    free(block);
    return;
  }
  int slot = 0; /* an empty slot, else the smallest kept buffer, replaced if this one is bigger */
  for (int k = 0; k < SCRATCH_SLOTS; k++) {
    if (!c->block[k]) {
      slot = k;
      break;
    }
    if (c->size[k] < c->size[slot]) slot = k;
  }
  if (c->block[slot]) {
    if (c->size[slot] >= size) {
      free(block);
      return;
    }
    free(c->block[slot]);
  }
  c->block[slot] = block;
  c->size[slot] = size;
}

/* Unloading: no thread may still call into the library; free every cache and the key, so no thread's
 * exit calls a destructor that is gone. */
static void scratch_unload(void) {
  if (!SC.key_ok) return;
  pthread_mutex_lock(&SC.lock);
  while (SC.all) scratch_drop(SC.all);
  pthread_mutex_unlock(&SC.lock);
  pthread_key_delete(SC.key);
  SC.key_ok = 0;
}

/* -- workers ---------------------------------------------------------------------------------------- */
static void after_fork_in_child(void) {
  /* the workers did not come along: run serially (their state may be mid-job) */
  atomic_store(&P.forked, P.nworkers > 0 || atomic_load(&P.forked));
  P.nworkers = 0;
  atomic_store(&P.busy, 0);
  atomic_store(&P.sleepers, 0);
  pthread_mutex_init(&P.lock, NULL);
  pthread_mutex_init(&SC.lock, NULL); /* another thread may have held it at the fork */
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

/* Workers 0..want-1 running (the caller holds `busy`); 0 if threads cannot be made. */
static int start_workers(int want) {
  if (want > MAX_WORKERS) want = MAX_WORKERS;
  if (P.nworkers >= want) return 1;
  pthread_once(&fork_once, register_fork_handler);
  pthread_mutex_lock(&P.lock);
  const char *aff = getenv("NNVM_POOL_AFFINITY");
  atomic_store(&affinity, !(aff && strcmp(aff, "0") == 0));
  atomic_store(&P.start_gen, atomic_load(&P.gen));
  P.owner = getpid();
  sigset_t all, old; /* signals go to the application's threads, never to ours */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  while (P.nworkers < want &&
         pthread_create(&P.workers[P.nworkers], NULL, worker_main, (void *)(intptr_t)P.nworkers) == 0)
    P.nworkers++;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_mutex_unlock(&P.lock);
  return P.nworkers > 0;
}

__attribute__((destructor)) static void stop_workers(void) {
  scratch_unload();
  pthread_mutex_lock(&P.lock);
  if (P.nworkers > 0 && P.owner == getpid()) {
    atomic_store(&P.stop, 1);
    atomic_fetch_add(&P.gen, 1);
    futex_wake(&P.gen, INT_MAX);
    for (int k = 0; k < P.nworkers; k++) pthread_join(P.workers[k], NULL);
    P.nworkers = 0;
    atomic_store(&P.stop, 0);
  }
  pthread_mutex_unlock(&P.lock);
}

#ifdef NNVM_POOL_STATS
/* bench/pool.py --stalls only (never in a build nnvm makes): how long callers wait, after their last
 * chunk, for the chunks still on workers; a long wait is a worker descheduled while it held a chunk.
 * out: regions run on the pool, waits over 100 us, the summed wait and the longest, in ns. */
static _Atomic uint64_t stat_regions, stat_stalls, stat_wait_ns, stat_max_ns;
NNVM_POOL_API void nnvm_pool_stats(uint64_t out[4]) {
  out[0] = stat_regions, out[1] = stat_stalls, out[2] = stat_wait_ns, out[3] = stat_max_ns;
}
#define STATS_JOIN_BEGIN() uint64_t stats_from = now_ns()
#define STATS_JOIN_END()                                                                         \
  do {                                                                                           \
    uint64_t w = now_ns() - stats_from;                                                          \
    stat_regions++;                                                                              \
    stat_wait_ns += w;                                                                           \
    stat_stalls += w > 100000;                                                                   \
    if (w > stat_max_ns) stat_max_ns = w;                                                        \
  } while (0)
#else
#define STATS_JOIN_BEGIN() ((void)0)
#define STATS_JOIN_END() ((void)0)
#endif

/* How many chunks a loop of `extent` iterations is cut into for `team` threads: CHUNKS_PER_THREAD a
 * thread, or, where those would not be the same size, the fewest (up to EVEN_SPLIT_MAX times as many)
 * that are and that the team shares evenly, else one iteration a chunk for a loop that short. Chunks of
 * unequal size leave one thread a whole iteration's work after the other is done: MobileNetV2's 960 ->
 * 160 on 7x7 is 10 channel-block groups, which 8 chunks cut 1,1,1,2,1,1,1,2 (2 threads: 116 -> 99 us
 * cut in 10); 42 rows go in 14 chunks of 3, not 8 of 5-6. A long loop keeps its CHUNKS_PER_THREAD: one
 * iteration more in a chunk is little there, and every chunk is a compare-and-swap on a shared line. */
static uint32_t even_chunks(int64_t extent, int32_t team) {
  int64_t chunks = (int64_t)team * CHUNKS_PER_THREAD;
  if (extent <= chunks) return (uint32_t)extent;
  if (extent % chunks == 0) return (uint32_t)chunks;
  for (int64_t n = chunks + team; n <= EVEN_SPLIT_MAX * chunks && n <= extent; n += team)
    if (extent % n == 0) return (uint32_t)n;
  return (uint32_t)(extent <= EVEN_SPLIT_MAX * chunks ? extent : chunks);
}

NNVM_POOL_API void nnvm_pool_run(nnvm_task fn, void *closure, int64_t extent, int32_t team) {
  if (team > extent) team = (int32_t)extent;
  if (team <= 1 || atomic_load_explicit(&P.forked, memory_order_relaxed) || atomic_exchange(&P.busy, 1)) {
    fn(closure, 0, extent);
    return;
  }
  if (!start_workers(team - 1)) {
    atomic_store(&P.busy, 0);
    fn(closure, 0, extent);
    return;
  }
  uint32_t n = even_chunks(extent, team);
  uint32_t g = atomic_load_explicit(&P.gen, memory_order_relaxed) + 1;
  /* seqlock write: close the ticket, write the job and the slots' counters, open the ticket */
  atomic_store_explicit(&P.ticket, (uint64_t)g << 32 | CLOSED, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&P.fn, fn, memory_order_relaxed);
  atomic_store_explicit(&P.closure, closure, memory_order_relaxed);
  atomic_store_explicit(&P.extent, extent, memory_order_relaxed);
  atomic_store_explicit(&P.nchunks, n, memory_order_relaxed);
  atomic_store_explicit(&P.team, team, memory_order_relaxed);
  int slots = atomic_load_explicit(&affinity, memory_order_relaxed) ? team : 1;
  atomic_store_explicit(&P.slots, slots, memory_order_relaxed);
  for (int v = 0; v < slots; v++)
    atomic_store_explicit(&SLOT[v].next, (uint64_t)g << 32 | slot_first(n, v, slots), memory_order_relaxed);
  atomic_store_explicit(&P.done, 0, memory_order_relaxed);
  atomic_store_explicit(&P.caller_asleep, 0, memory_order_relaxed);
  atomic_store_explicit(&P.ticket, (uint64_t)g << 32, memory_order_release);
  atomic_store(&P.gen, g);
  if (atomic_load(&P.sleepers) > 0) futex_wake(&P.gen, INT_MAX);
  work(g, -1);
  STATS_JOIN_BEGIN();
  /* the last chunks may still run on workers: spin a while, then sleep until the last one wakes us */
  uint64_t until = 0;
  unsigned spins = 0;
  for (uint32_t d; (d = atomic_load_explicit(&P.done, memory_order_acquire)) != n; spins++) {
    relax();
    if ((spins & 63) != 63) continue;
    uint64_t now = now_ns();
    if (!until) until = now + SPIN_NS;
    if (now < until) continue;
    atomic_store(&P.caller_asleep, 1);
    if ((d = atomic_load(&P.done)) != n) futex_wait(&P.done, d);
  }
  STATS_JOIN_END();
  atomic_store_explicit(&P.busy, 0, memory_order_release);
}

NNVM_POOL_API int32_t nnvm_run_kernels(int64_t n, void *const *kernels, void *const *args, int64_t *failed) {
  /* kernels[k](args[k]) in order; the first nonzero status stops the run, its index in *failed */
  for (int64_t k = 0; k < n; k++) {
    int32_t (*kernel)(void *) = (int32_t (*)(void *))kernels[k];
    int32_t rc = kernel(args[k]);
    if (rc != 0) {
      *failed = k;
      return rc;
    }
  }
  return 0;
}

NNVM_POOL_API int32_t nnvm_pool_team(int32_t *cache) {
  int32_t n = __atomic_load_n(cache, __ATOMIC_RELAXED);
  if (n <= 0) {
    const char *v = getenv("NNVM_NUM_THREADS");
    n = v ? atoi(v) : 0;
    if (n <= 0 && (v = getenv("OMP_NUM_THREADS"))) n = atoi(v); /* "4,2" (nested teams) reads 4 */
    cpu_set_t cpus;
    if (n <= 0 && sched_getaffinity(0, sizeof cpus, &cpus) == 0) n = CPU_COUNT(&cpus);
    if (n <= 0) n = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    n = n < 1 ? 1 : n > MAX_WORKERS + 1 ? MAX_WORKERS + 1 : n;
    __atomic_store_n(cache, n, __ATOMIC_RELAXED);
  }
  return atomic_load_explicit(&P.forked, memory_order_relaxed) ? 1 : n;
}
