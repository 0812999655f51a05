// What a program's threads cost in resident memory before they hold any real data: 8 threads
// each allocate one 8 KiB object (tracked by libobjtier) and 100 small ones, and the main
// thread prints how much RssAnon grew, in KiB, while all of them are alive. Under transparent
// huge pages `always`, every 2 MiB-aligned range an allocator touches first can become a whole
// huge page; tests/vm/tiering.sh thp-threads bounds what libobjtier adds.
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 8

static pthread_barrier_t allocated, measured;

static long rss_anon_kib(void) {
	char buf[8192];
	int fd = open("/proc/self/status", O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
	if (fd >= 0) close(fd);
	if (n <= 0) return -1;
	buf[n] = 0;
	char *line = strstr(buf, "RssAnon:");
	return line ? atol(line + strlen("RssAnon:")) : -1;
}

static void *thread(void *arg) {
	(void)arg;
	char *big = malloc(8192);
	memset(big, 1, 8192);
	char *small[100];
	for (int i = 0; i < 100; i++) {
		small[i] = malloc(64);
		memset(small[i], 2, 64);
	}
	pthread_barrier_wait(&allocated);
	pthread_barrier_wait(&measured);
	for (int i = 0; i < 100; i++) free(small[i]);
	free(big);
	return NULL;
}

int main(void) {
	pthread_t t[THREADS];
	pthread_barrier_init(&allocated, NULL, THREADS + 1);
	pthread_barrier_init(&measured, NULL, THREADS + 1);
	long before = rss_anon_kib();
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, thread, NULL) != 0) return 1;
	pthread_barrier_wait(&allocated);
	long after = rss_anon_kib();
	pthread_barrier_wait(&measured);
	for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
	if (before < 0 || after < 0) return 1;
	printf("%ld\n", after - before);
	return 0;
}
