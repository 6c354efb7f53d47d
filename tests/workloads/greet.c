/* Calls wasmtap_greet(name) for each name argv[2..], argv[1] times each, in turn; the
 * function returns a greeting of its own per name ("hello NAME"). Prints to stderr
 * "greeted N" once done. For tests of user probes' strings: str(arg0), str(retval). */
#include <stdio.h>
#include <stdlib.h>

static char greeting[64];

__attribute__((noinline)) const char *wasmtap_greet(const char *name)
{
	snprintf(greeting, sizeof(greeting), "hello %s", name);
	__asm__ volatile("" ::: "memory");
	return greeting;
}

int main(int argc, char **argv)
{
	long times = argc > 1 ? atol(argv[1]) : 1, n = 0;

	for (long i = 0; i < times; i++)
		for (int a = 2; a < argc; a++, n++)
			wasmtap_greet(argv[a]);
	fprintf(stderr, "greeted %ld\n", n);
	return 0;
}
