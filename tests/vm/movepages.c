/*
 * movepages: move a buffer's pages to each given NUMA node and back with move_pages(2),
 * checking every step with a status query (move_pages with nodes == NULL).
 *
 * Usage: movepages NPAGES HOME_NODE NODE [NODE...]
 * For each NODE: move all pages to NODE, verify, move them back to HOME_NODE, verify.
 * Uses the raw syscall so it needs no libnuma. Exit status 0 on success, 1 on failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MPOL_MF_MOVE (1 << 1)

static long move_pages(unsigned long count, void **pages, const int *nodes, int *status)
{
	return syscall(SYS_move_pages, 0, count, pages, nodes, status, MPOL_MF_MOVE);
}

/* Move (or, with node < 0, only query) all pages; return how many ended up on `want`. */
static int place(unsigned long n, void **pages, int node, int want, int *status)
{
	int *nodes = NULL;
	if (node >= 0) {
		nodes = malloc(n * sizeof(int));
		for (unsigned long i = 0; i < n; i++)
			nodes[i] = node;
	}
	long rc = move_pages(n, pages, nodes, status);
	free(nodes);
	if (rc < 0) {
		fprintf(stderr, "movepages: move_pages(%s node %d): %s\n",
			node >= 0 ? "to" : "query", node, strerror(errno));
		return -1;
	}
	if (node < 0) {
		int on = 0;
		for (unsigned long i = 0; i < n; i++)
			on += status[i] == want;
		return on;
	}
	/* After a move, query separately: that is the real check. */
	return place(n, pages, -1, want, status);
}

static int check(unsigned long n, void **pages, int node, int *status)
{
	int on = place(n, pages, node, node, status);
	if (on < 0)
		return -1;
	printf("movepages: %d/%lu pages on node %d (first status %d)\n", on, n, node, status[0]);
	if ((unsigned long)on != n) {
		fprintf(stderr, "movepages: FAIL: only %d of %lu pages on node %d\n", on, n, node);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s NPAGES HOME_NODE NODE [NODE...]\n", argv[0]);
		return 2;
	}
	unsigned long n = strtoul(argv[1], NULL, 0);
	int home = atoi(argv[2]);
	long psz = sysconf(_SC_PAGESIZE);
	char *buf = mmap(NULL, n * psz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	void **pages = malloc(n * sizeof(void *));
	int *status = malloc(n * sizeof(int));
	for (unsigned long i = 0; i < n; i++) {
		buf[i * psz] = (char)i; /* fault it in */
		pages[i] = buf + i * psz;
	}
	if (check(n, pages, home, status))
		return 1;
	for (int a = 3; a < argc; a++) {
		int node = atoi(argv[a]);
		if (check(n, pages, node, status) || check(n, pages, home, status))
			return 1;
	}
	for (unsigned long i = 0; i < n; i++)
		if (buf[i * psz] != (char)i) {
			fprintf(stderr, "movepages: FAIL: page %lu content changed\n", i);
			return 1;
		}
	printf("movepages: OK\n");
	return 0;
}
