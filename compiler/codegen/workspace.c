/* temper's workspace allocator: memory for the buffers a kernel allocates while it runs (a padded
 * copy of its input, the transformed tiles of a Winograd convolution).
 *
 * Linked into every lib.so beside parallel.c, with hidden visibility: each loaded library keeps a
 * cache of its own. A kernel allocates the same sizes on every call, and a large block from malloc
 * comes from mmap and goes back to the OS when freed, so every call would fault in fresh zeroed
 * pages, often more time than the kernel's arithmetic. Freed blocks are kept here instead and
 * handed out again (best fit: the smallest cached block that is large enough).
 *
 * Bounded: at most CACHED_BLOCKS blocks and CACHED_BYTES bytes are kept; a block that does not fit
 * goes back to libc (when it is larger than the smallest cached block, that one goes instead).
 * temper_workspace_release() returns everything, called when the runtime's Module is collected
 * (the library itself is never unloaded, see library.py).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define API __attribute__((visibility("default")))
#define CACHED_BLOCKS 32
#define CACHED_BYTES ((int64_t)1 << 30)
#define ALIGNMENT 64

struct block {
    void *ptr;
    int64_t bytes;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct block cache[CACHED_BLOCKS];
static int cached;
static int64_t cached_bytes;

static void take(int i, void **out) {
    *out = cache[i].ptr;
    cached_bytes -= cache[i].bytes;
    cache[i] = cache[--cached];
}

/* A block of at least `bytes` bytes (a multiple of ALIGNMENT), aligned to ALIGNMENT; NULL when the
 * system has no memory left. */
void *temper_workspace_alloc(int64_t bytes) {
    void *p = NULL;
    pthread_mutex_lock(&lock);
    int best = -1;
    for (int i = 0; i < cached; ++i)
        if (cache[i].bytes >= bytes && (best < 0 || cache[i].bytes < cache[best].bytes)) best = i;
    if (best >= 0) take(best, &p);
    pthread_mutex_unlock(&lock);
    return p != NULL ? p : aligned_alloc(ALIGNMENT, (size_t)bytes);
}

/* Give back a block of `bytes` bytes from temper_workspace_alloc (the size asked for: a reused
 * block may be larger, it is then cached as the smaller size, which only wastes its tail). */
void temper_workspace_free(void *p, int64_t bytes) {
    if (p == NULL) return;
    void *evicted = NULL;
    int kept = 0;
    pthread_mutex_lock(&lock);
    int smallest = -1;
    for (int i = 0; i < cached; ++i)
        if (smallest < 0 || cache[i].bytes < cache[smallest].bytes) smallest = i;
    if (cached == CACHED_BLOCKS && cache[smallest].bytes < bytes &&
        cached_bytes - cache[smallest].bytes + bytes <= CACHED_BYTES)
        take(smallest, &evicted);
    if (cached < CACHED_BLOCKS && cached_bytes + bytes <= CACHED_BYTES) {
        cache[cached++] = (struct block){p, bytes};
        cached_bytes += bytes;
        kept = 1;
    }
    pthread_mutex_unlock(&lock);
    free(evicted);
    if (!kept) free(p);
}

/* Free every cached block (the kernels still work afterwards: they allocate anew). */
API void temper_workspace_release(void) {
    pthread_mutex_lock(&lock);
    while (cached > 0) {
        void *p;
        take(cached - 1, &p);
        free(p);
    }
    pthread_mutex_unlock(&lock);
}
