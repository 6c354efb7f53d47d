/* Touches K fresh pages (argv[1]) of an anonymous mapping, then prints the kernel's own
 * count of this process's minor faults (/proc/self/stat field 10). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long k = argc > 1 ? atol(argv[1]) : 10000, page = sysconf(_SC_PAGESIZE), minflt = -1;
	char *p = mmap(NULL, k * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char buf[1024];
	FILE *f;

	if (p == MAP_FAILED)
		return 1;
	for (long i = 0; i < k; i++)
		p[i * page] = 1;
	f = fopen("/proc/self/stat", "r");
	if (f && fgets(buf, sizeof(buf), f)) {
		char *s = buf;
		/* skip "pid (comm) " then fields 3..9 */
		s = strrchr(buf, ')') + 2;
		sscanf(s, "%*c %*d %*d %*d %*d %*d %*u %ld", &minflt);
	}
	printf("touched %ld minflt %ld\n", k, minflt);
	return 0;
}
