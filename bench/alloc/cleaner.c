/* cleaner: worker threads fill batches of buffers of 1 B to 50 KB and hand each full batch to one
 * cleaner thread, which frees it and hands it back: the way a runtime's cleaner frees the
 * buffers its workers dropped (a JVM's direct buffers), or a pipeline's last stage frees what
 * the first allocated. Every free is another thread's, and the process stays near its peak.
 * Usage: cleaner [workers] [batches-per-worker] [batch]. Prints a checksum of what was
 * allocated and the number of corrupted bytes the cleaner found (must be 0). */
#include "common.h"
#include <pthread.h>

struct buffer {
    unsigned char *data;
    size_t size;
    uint64_t tag;
};

struct worker {
    pthread_t thread;
    int index;
    struct buffer *batch;
    int full; /* under `lock`: the batch waits for the cleaner */
    uint64_t checksum;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static long batches_per_worker = 20, batch_size = 20000;

static void *work(void *arg) {
    struct worker *w = arg;
    uint64_t rng = 0x5EED0006 + (uint64_t)w->index;
    for (long b = 0; b < batches_per_worker; b++) {
        pthread_mutex_lock(&lock);
        while (w->full) pthread_cond_wait(&changed, &lock);
        pthread_mutex_unlock(&lock);
        for (long i = 0; i < batch_size; i++) {
            struct buffer *buf = &w->batch[i];
            buf->size = rng_range(&rng, 1, 50000);
            buf->tag = rng_next(&rng);
            buf->data = xmalloc(buf->size);
            pattern_fill_sparse(buf->data, buf->size, buf->tag);
            w->checksum += buf->size ^ buf->tag;
        }
        pthread_mutex_lock(&lock);
        w->full = 1;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int workers = argc > 1 ? atoi(argv[1]) : 3;
    if (argc > 2) batches_per_worker = atol(argv[2]);
    if (argc > 3) batch_size = atol(argv[3]);
    if (workers < 1 || workers > 64 || batches_per_worker < 1 || batch_size < 1) {
        fprintf(stderr, "usage: cleaner [workers 1..64] [batches-per-worker >= 1] [batch >= 1]\n");
        return 2;
    }
    struct worker *ws = calloc((size_t)workers, sizeof *ws);
    if (!ws) return 1;
    for (int i = 0; i < workers; i++) {
        ws[i].index = i;
        ws[i].batch = xmalloc((size_t)batch_size * sizeof *ws[i].batch);
        pthread_create(&ws[i].thread, NULL, work, &ws[i]);
    }
    unsigned long errors = 0;
    for (long cleaned = 0; cleaned < workers * batches_per_worker; cleaned++) {
        pthread_mutex_lock(&lock);
        struct worker *w = NULL;
        while (!w) {
            for (int i = 0; i < workers && !w; i++)
                if (ws[i].full) w = &ws[i];
            if (!w) pthread_cond_wait(&changed, &lock);
        }
        pthread_mutex_unlock(&lock);
        for (long i = 0; i < batch_size; i++) {
            struct buffer *buf = &w->batch[i];
            errors += pattern_check_sparse(buf->data, buf->size, buf->tag);
            free(buf->data);
        }
        pthread_mutex_lock(&lock);
        w->full = 0;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
    }
    uint64_t checksum = 0;
    for (int i = 0; i < workers; i++) {
        pthread_join(ws[i].thread, NULL);
        checksum += ws[i].checksum;
        free(ws[i].batch);
    }
    free(ws);
    printf("cleaner workers=%d batches=%ld batch=%ld checksum=%016llx errors=%lu\n", workers,
           batches_per_worker, batch_size, (unsigned long long)checksum, errors);
    return errors != 0;
}
