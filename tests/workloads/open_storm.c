/* An open storm: openat + close of argv[2] (default /etc/hostname) argv[1] times
 * (default 200000), as fast as it goes. Prints "opens N" to stderr. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000;
	const char *path = argc > 2 ? argv[2] : "/etc/hostname";

	for (long i = 0; i < n; i++) {
		int fd = openat(AT_FDCWD, path, O_RDONLY);

		if (fd < 0)
			return 1;
		close(fd);
	}
	fprintf(stderr, "opens %ld\n", n);
	return 0;
}
