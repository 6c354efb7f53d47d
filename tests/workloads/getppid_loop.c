/* Calls getppid() exactly N times (argv[1], default 1000000), then prints N to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;

	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	fprintf(stderr, "%ld\n", n);
	return 0;
}
