/* Calls malloc exactly N times (argv[1]) and prints each returned pointer in hex, one
 * per line, with write(2): no stdio, so libc itself never calls malloc here. */
#include <stdlib.h>
#include <unistd.h>

static void put_hex(unsigned long v)
{
	char buf[24];
	int i = sizeof(buf);

	buf[--i] = '\n';
	do {
		buf[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	buf[--i] = 'x';
	buf[--i] = '0';
	write(1, buf + i, sizeof(buf) - i);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	void *keep[4096];

	if (n > 4096)
		n = 4096;
	for (long i = 0; i < n; i++) {
		keep[i] = malloc(16 + (i % 64));
		put_hex((unsigned long)keep[i]);
	}
	return keep[0] == NULL;
}
