/* Writes a known number of bytes in a known number of calls, per file descriptor:
 *   a temp file: N write(2) calls of S bytes (argv[1] = N, default 100; argv[2] = S,
 *   default 1000), then N pwrite64 calls of S bytes;
 *   a pipe it drains itself: N write calls of S/2 bytes;
 *   /dev/null: N writev calls of two iovecs of S bytes each;
 *   a closed fd: E writes that fail with EBADF (argv[3] = E, default 5).
 * argv[4] ms (default 0) of sleep sit between the first and the second half of the
 * file's write calls, so that an interval can fall between them.
 * Prints to stderr its pid, then "fd FD ops OPS bytes BYTES errors ERRORS" per fd. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100, s = argc > 2 ? atoi(argv[2]) : 1000, e = argc > 3 ? atoi(argv[3]) : 5;
	int pause_ms = argc > 4 ? atoi(argv[4]) : 0;
	char path[] = "/tmp/wt-writer-XXXXXX";
	char *buf = calloc(1, s), *sink = malloc(s);
	int file = mkstemp(path), pipefd[2], null = open("/dev/null", O_WRONLY), bad;
	long long file_bytes = 0, pipe_bytes = 0, null_bytes = 0;
	struct iovec iov[2] = { { buf, s }, { buf, s } };

	if (file < 0 || null < 0 || pipe(pipefd) || !buf || !sink)
		return 1;
	bad = dup(null);
	close(bad);
	for (int i = 0; i < n; i++) {
		if (i == n / 2)
			usleep(pause_ms * 1000);
		file_bytes += write(file, buf, s);
	}
	for (int i = 0; i < n; i++)
		file_bytes += pwrite(file, buf, s, (off_t)i * s);
	for (int i = 0; i < n; i++) {
		pipe_bytes += write(pipefd[1], buf, s / 2);
		if (read(pipefd[0], sink, s) != s / 2)
			return 1;
	}
	for (int i = 0; i < n; i++)
		null_bytes += writev(null, iov, 2);
	for (int i = 0; i < e; i++)
		if (write(bad, buf, s) != -1)
			return 1;
	fprintf(stderr, "pid %d\n", getpid());
	fprintf(stderr, "fd %d ops %d bytes %lld errors 0\n", file, 2 * n, file_bytes);
	fprintf(stderr, "fd %d ops %d bytes %lld errors 0\n", pipefd[1], n, pipe_bytes);
	fprintf(stderr, "fd %d ops %d bytes %lld errors 0\n", null, n, null_bytes);
	fprintf(stderr, "fd %d ops %d bytes 0 errors %d\n", bad, e, e);
	unlink(path);
	return 0;
}
