/* W4: touch MiB (argv[1], default 2048) of fresh anonymous pages, one write per 4 KiB
 * page, 64 MiB at a time (mmap, touch, munmap), so each touch is a page fault.
 * Prints "ops PAGES ns_per_op X" to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define CHUNK (64L << 20)
#define PAGE 4096L

int main(int argc, char **argv)
{
	long mib = argc > 1 ? atol(argv[1]) : 2048, pages = 0;
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long done = 0; done < (mib << 20); done += CHUNK) {
		char *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			return 1;
		for (long off = 0; off < CHUNK; off += PAGE, pages++)
			((volatile char *)p)[off] = 1;
		munmap(p, CHUNK);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("ops %ld ns_per_op %.1f\n", pages, ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / pages);
	return 0;
}
