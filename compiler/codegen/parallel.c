/* temper's parallel runtime: the thread pool that runs the parallel loops of one kernel library.
 *
 * Linked into every lib.so that temper builds (compiler/codegen/library.py), with hidden
 * visibility: each loaded library has a pool of its own, and an artifact still needs nothing but
 * libc. Codegen outlines the body of a parallel loop into `body(data, start, end)`, which runs the
 * iterations [start, end), and calls temper_parallel_for(body, data, extent).
 *
 * Why not OpenMP: a GOMP parallel region ends on a team barrier that waits for every thread of
 * the team. When another process keeps a core busy, the OS deschedules one of the threads and the
 * whole kernel waits for it, once per kernel, even if the others could have done its share.
 * Here work is claimed dynamically, and the caller never waits for a thread that has not claimed
 * anything.
 *
 * The work. The extent is split into one contiguous share per thread, as a static schedule would
 * (share t starts at t * ceil(extent / threads)), so that when every thread runs, each keeps the
 * same part of the data from one call to the next (some kernels rely on each thread keeping its
 * part of the weights in its own L2). Each share is cut into up to CHUNKS_PER_SHARE chunks,
 * described by one 64-bit word `span` = (hi << 32 | lo): chunks lo..hi-1 are unclaimed. Thread t
 * claims chunks from the front of its own share (CAS lo -> lo + 1), then steals from the back of
 * the other shares (CAS hi -> hi - 1), so that owner and thief work from opposite ends. The calling
 * thread is thread 0 and takes part; worker w owns share w.
 *
 * The protocol (every atomic below is sequentially consistent unless marked relaxed).
 *
 *   publish  (the caller, holding `busy`): write the job (body, data, extent) in plain fields;
 *            store remaining = chunk count; store every share's span; increment `generation`;
 *            if `sleepers` > 0, futex-wake the sleepers.
 *   claim    (any thread): CAS on a span that has lo < hi; only a successful CAS entitles a thread
 *            to read the job fields, run the chunk and then decrement `remaining`.
 *   finish   (the caller): after its claims fail everywhere, wait until remaining == 0, then
 *            release `busy`. Returning needs nothing from a worker that has not claimed a chunk.
 *
 * Why a late worker never touches a stale job: a worker may have been descheduled for any length
 * of time between waking and claiming, so the job it was woken for may be over and the fields
 * rewritten for the next one. It reads no job field before a successful claim, though, and
 *   - once a job is over, all its spans are empty (remaining reached 0 only after every chunk was
 *     claimed and run), so no claim on that job can succeed any more;
 *   - a claim that succeeds read a span stored by the publisher of the job that is current, after
 *     that publisher wrote the job fields and `remaining` (the CAS reads from that store or from a
 *     later claim in its release sequence, so it synchronises with the publisher): the fields it
 *     then reads are that job's;
 *   - that job cannot end, and its fields cannot be rewritten, before the claimed chunk is done:
 *     the next publisher first saw remaining == 0, which reads from the decrement made after the
 *     chunk ran (every decrement heads a release sequence of the later ones), so the claimant's
 *     reads of the fields happen before the next publisher's writes.
 * The span words need no generation tag for the same reason: a stale CAS that happens to find the
 * same (lo, hi) in a newer job's span claims a chunk of that newer job, correctly.
 *
 * Sleeping: an idle worker spins for a while (pause, then sched_yield so that a busy neighbour
 * gets the core), then sleeps on a futex on `generation`. A worker increments `sleepers` and then
 * re-reads `generation` before sleeping; the publisher increments `generation` and then reads
 * `sleepers`. In the single order of these sequentially consistent operations one of the two
 * reads sees the other's write: the worker does not sleep, or the publisher wakes it; and
 * FUTEX_WAIT itself returns at once if `generation` changed before the worker got to sleep. When
 * nobody sleeps, publishing costs no system call.
 *
 * Concurrency: one job per pool at a time. A caller that finds the pool busy (another Python
 * thread running a kernel of the same library, or a nested parallel loop) runs its loop serially
 * in its own thread rather than waiting.
 *
 * Lifetime: workers start on the first parallel loop and are detached. temper_parallel_stop()
 * (called when a Module is garbage-collected) ends them: it bumps `epoch` and then `generation`,
 * and a worker that wakes to a new generation under a new epoch returns. A worker of an old epoch
 * that has not noticed yet may still claim chunks of a newer job, which is as safe as any claim
 * (shares live in a static array, never freed). The next parallel loop starts new workers. After
 * fork() the child has no workers: a pthread_atfork handler resets the pool, which starts again on
 * the child's first parallel loop. The library is linked with -z nodelete, so that no worker ever
 * runs code that has been unmapped.
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
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))
#define WORKER_STACK_BYTES ((size_t)8 << 20)
#define LINE 128 /* two cache lines: adjacent-line prefetch must not couple two threads' words */

#ifndef CHUNKS_PER_SHARE
#define CHUNKS_PER_SHARE 8 /* enough to rebalance around a slow thread, few enough to stay cheap */
#endif
#ifndef SPIN_PAUSE_NS
#define SPIN_PAUSE_NS 20000 /* an idle worker first spins on `pause`: the next kernel is close */
#endif
#ifndef SPIN_YIELD_NS
#define SPIN_YIELD_NS 1000000 /* ... then yields the core between polls, then sleeps */
#endif
#ifndef CALLER_SPINS
#define CALLER_SPINS 4096 /* a caller waiting for the last chunks spins this long, then yields */
#endif
#define MAX_THREADS 1024

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

typedef void (*temper_body)(void *data, int64_t start, int64_t end);

struct share {
    _Alignas(LINE) _Atomic uint64_t span; /* hi << 32 | lo: the unclaimed chunks lo..hi-1 */
};

enum { UNSTARTED, READY };

static struct share shares[MAX_THREADS]; /* only the first `threads` are used */

static struct {
    /* set up by the caller that holds `busy` (first parallel loop, stop), reset in a forked child */
    int state;
    _Atomic int threads; /* participants: the caller and threads - 1 workers */
    /* the current job: written by the caller holding `busy`, read after a successful claim only */
    temper_body body;
    void *data;
    int64_t extent;
    int64_t share_len;
    _Alignas(LINE) _Atomic int busy;
    _Alignas(LINE) _Atomic uint32_t generation;
    _Atomic uint32_t epoch; /* bumped when the workers are told to end */
    _Alignas(LINE) _Atomic int sleepers;
    _Alignas(LINE) _Atomic int64_t remaining;
} pool;

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------------------ chunks */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Iterations of share s, and into how many chunks it is cut. */
static int64_t share_length(int s) {
    int64_t start = s * pool.share_len;
    return start >= pool.extent ? 0 : min64(pool.share_len, pool.extent - start);
}

static int64_t share_chunks(int s) { return min64(CHUNKS_PER_SHARE, share_length(s)); }

static void run_chunk(int s, uint32_t chunk) {
    int64_t n = share_length(s), k = share_chunks(s), base = s * pool.share_len;
    pool.body(pool.data, base + chunk * n / k, base + (chunk + 1) * n / k);
    atomic_fetch_sub(&pool.remaining, 1);
}

static int claim_front(struct share *sh, uint32_t *chunk) {
    uint64_t span = atomic_load_explicit(&sh->span, memory_order_relaxed);
    while ((uint32_t)span < (uint32_t)(span >> 32)) {
        if (atomic_compare_exchange_weak(&sh->span, &span, span + 1)) {
            *chunk = (uint32_t)span;
            return 1;
        }
    }
    return 0;
}

static int claim_back(struct share *sh, uint32_t *chunk) {
    uint64_t span = atomic_load_explicit(&sh->span, memory_order_relaxed);
    while ((uint32_t)span < (uint32_t)(span >> 32)) {
        if (atomic_compare_exchange_weak(&sh->span, &span, span - ((uint64_t)1 << 32))) {
            *chunk = (uint32_t)(span >> 32) - 1;
            return 1;
        }
    }
    return 0;
}

/* Thread `self` runs chunks until none is left unclaimed: its own share first, then the others. */
static void work(int self) {
    int threads = atomic_load_explicit(&pool.threads, memory_order_relaxed);
    uint32_t chunk;
    while (claim_front(&shares[self], &chunk)) run_chunk(self, chunk);
    for (int d = 1; d < threads; ++d) {
        int victim = (self + d) % threads;
        while (claim_back(&shares[victim], &chunk)) run_chunk(victim, chunk);
    }
}

/* ------------------------------------------------------------------------------ waiting */

static long futex(_Atomic uint32_t *addr, int op, uint32_t value) {
    return syscall(SYS_futex, (uint32_t *)addr, op | FUTEX_PRIVATE_FLAG, value, NULL, NULL, 0);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Until `generation` differs from *seen (then *seen is updated): spin, yield, then sleep. */
static void wait_for_job(uint32_t *seen) {
    int64_t start = now_ns();
    for (unsigned i = 1;; ++i) {
        uint32_t g = atomic_load_explicit(&pool.generation, memory_order_relaxed);
        if (g != *seen) {
            *seen = g;
            return;
        }
        if (i % 64 == 0) {
            int64_t spent = now_ns() - start;
            if (spent > SPIN_PAUSE_NS + SPIN_YIELD_NS) break;
            if (spent > SPIN_PAUSE_NS) sched_yield();
        }
        cpu_relax();
    }
    for (;;) {
        atomic_fetch_add(&pool.sleepers, 1);
        uint32_t g = atomic_load(&pool.generation);
        if (g == *seen) futex(&pool.generation, FUTEX_WAIT, g);
        atomic_fetch_sub(&pool.sleepers, 1);
        g = atomic_load(&pool.generation);
        if (g != *seen) {
            *seen = g;
            return;
        }
    }
}

struct worker {
    int self;
    uint32_t epoch;
};

static void *worker_main(void *arg) {
    struct worker me = *(struct worker *)arg;
    free(arg);
    /* `seen` is read before `epoch`: temper_parallel_stop bumps epoch before generation, so either
     * this thread sees the new epoch now or the new generation wakes it to see it below */
    uint32_t seen = atomic_load(&pool.generation);
    while (atomic_load(&pool.epoch) == me.epoch) {
        work(me.self); /* a job published before this thread first looked is taken too */
        wait_for_job(&seen);
    }
    return NULL;
}

/* ------------------------------------------------------------------------------ the pool */

static int wanted_threads(void) {
    const char *env = getenv("TEMPER_NUM_THREADS");
    if (env != NULL && *env != '\0') {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end == '\0' && n >= 1) return n < MAX_THREADS ? (int)n : MAX_THREADS;
    }
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) {
        int n = CPU_COUNT(&cpus);
        if (n >= 1) return n < MAX_THREADS ? n : MAX_THREADS;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 && n < MAX_THREADS ? (int)n : 1;
}

static void reset_in_child(void) {
    /* only the forking thread exists in the child: nobody else can be using the pool, not even
     * the thread that was running a job in the parent when another one forked */
    for (int s = 0; s < MAX_THREADS; ++s) atomic_store_explicit(&shares[s].span, 0, memory_order_relaxed);
    pool.state = UNSTARTED;
    atomic_store(&pool.threads, 0);
    atomic_fetch_add(&pool.epoch, 1);
    atomic_store(&pool.busy, 0);
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.remaining, 0);
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, reset_in_child); }

static void take_pool(void) {
    int expected = 0;
    while (!atomic_compare_exchange_weak(&pool.busy, &expected, 1)) {
        expected = 0;
        sched_yield();
    }
}

/* Called by the caller holding `busy`: size the pool and start its workers. A worker that cannot
 * be started leaves its share to the others (they steal it). */
static void start_pool(void) {
    pthread_once(&atfork_once, register_atfork);
    int threads = wanted_threads();
    atomic_store(&pool.threads, threads);
    pool.state = READY;
    if (threads == 1) return;
    uint32_t epoch = atomic_load(&pool.epoch);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* kernels keep per-chunk buffers on the stack (register tiles, a Winograd chunk's tiles, at most
     * MAX_STACK_BUFFER_BYTES each, see llvm.py): a fixed size, whatever the environment's default */
    pthread_attr_setstacksize(&attr, WORKER_STACK_BYTES);
    sigset_t all, old; /* workers take no signals: they go to the application's threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int w = 1; w < threads; ++w) {
        struct worker *arg = malloc(sizeof *arg);
        pthread_t thread;
        if (arg == NULL) break;
        *arg = (struct worker){w, epoch};
        if (pthread_create(&thread, &attr, worker_main, arg) == 0)
            pthread_setname_np(thread, "temper-worker");
        else
            free(arg);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

void temper_parallel_for(temper_body body, void *data, int64_t extent) {
    int expected = 0;
    if (extent <= 1 || !atomic_compare_exchange_strong(&pool.busy, &expected, 1)) {
        body(data, 0, extent); /* one iteration, or the pool runs another job: run it here */
        return;
    }
    if (pool.state == UNSTARTED) start_pool();
    int threads = atomic_load_explicit(&pool.threads, memory_order_relaxed);
    if (threads == 1) {
        atomic_store(&pool.busy, 0);
        body(data, 0, extent);
        return;
    }
    /* publish */
    pool.body = body;
    pool.data = data;
    pool.extent = extent;
    pool.share_len = (extent + threads - 1) / threads;
    int64_t chunks = 0;
    for (int s = 0; s < threads; ++s) chunks += share_chunks(s);
    atomic_store(&pool.remaining, chunks);
    for (int s = 0; s < threads; ++s) atomic_store(&shares[s].span, (uint64_t)share_chunks(s) << 32);
    atomic_fetch_add(&pool.generation, 1);
    if (atomic_load(&pool.sleepers) > 0) futex(&pool.generation, FUTEX_WAKE, INT_MAX);
    /* claim, then wait for the chunks that workers claimed and still run */
    work(0);
    for (unsigned spins = 0; atomic_load(&pool.remaining) != 0; ++spins) {
        if (spins < CALLER_SPINS)
            cpu_relax();
        else
            sched_yield(); /* the thread running the last chunk may be waiting for this core */
    }
    atomic_store(&pool.busy, 0);
}

/* The number of threads (the caller included) that parallel loops run on, or would run on if the
 * pool has not started yet; starts nothing. */
API int32_t temper_parallel_threads(void) {
    int threads = atomic_load(&pool.threads);
    return threads > 0 ? threads : wanted_threads();
}

/* Ends the pool's workers (after the loop running now, if any); the next parallel loop starts new
 * ones. Returns without waiting for them to exit. */
API void temper_parallel_stop(void) {
    take_pool();
    if (pool.state == READY) {
        pool.state = UNSTARTED;
        atomic_store(&pool.threads, 0);
        atomic_fetch_add(&pool.epoch, 1);
        atomic_fetch_add(&pool.generation, 1);
        if (atomic_load(&pool.sleepers) > 0) futex(&pool.generation, FUTEX_WAKE, INT_MAX);
    }
    atomic_store(&pool.busy, 0);
}
