/* Known calls for bpftrace's tools, N each (argv[2], default 10), by MODE (argv[1]):
 *   stat:    stat, lstat, statfs and statx of the missing paths /tmp/wt-stat-i (ENOENT);
 *   kill:    kill(own pid, 0) (succeeds) and kill(a pid that does not exist, 0) (ESRCH);
 *   sync:    sync, syncfs, fsync, fdatasync, sync_file_range and msync of a scratch file;
 *   setuid:  setuid(0), setfsuid(0) and setresuid(0, 0, 0) (as root, each succeeds);
 *   resolve: getaddrinfo, gethostbyname and gethostbyname2 of "localhost" (/etc/hosts);
 *   fork:    N children that exit at once, each reaped; then a pause of argv[3] ms;
 *   thread:  N threads, one after another, each started at wt_thread_main and joined.
 * Prints to stderr "tool_calls MODE PID done N". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Where each thread of mode `thread` starts: threadsnoop names it. */
__attribute__((noinline)) void *wt_thread_main(void *arg)
{
	return arg;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "stat";
	long n = argc > 2 ? atol(argv[2]) : 10;
	char path[64];

	for (long i = 0; i < n; i++) {
		if (!strcmp(mode, "stat")) {
			struct stat st;
			struct statfs sf;
			struct statx sx;

			snprintf(path, sizeof(path), "/tmp/wt-stat-%ld", i);
			syscall(SYS_stat, path, &st);
			syscall(SYS_lstat, path, &st);
			statfs(path, &sf);
			statx(AT_FDCWD, path, 0, STATX_BASIC_STATS, &sx);
		} else if (!strcmp(mode, "kill")) {
			kill(getpid(), 0);
			kill(4194303, 0);
		} else if (!strcmp(mode, "sync")) {
			int fd = open("/tmp/wt-sync-scratch", O_RDWR | O_CREAT, 0600);
			char *m;

			if (fd < 0 || ftruncate(fd, 4096))
				return 1;
			m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (m == MAP_FAILED)
				return 1;
			m[0] = 1;
			sync();
			syncfs(fd);
			fsync(fd);
			fdatasync(fd);
			sync_file_range(fd, 0, 4096, SYNC_FILE_RANGE_WRITE);
			msync(m, 4096, MS_SYNC);
			munmap(m, 4096);
			close(fd);
			unlink("/tmp/wt-sync-scratch");
		} else if (!strcmp(mode, "setuid")) {
			if (setuid(0) || setresuid(0, 0, 0))
				return 1;
			setfsuid(0);
		} else if (!strcmp(mode, "resolve")) {
			struct addrinfo *ai = NULL;

			if (!getaddrinfo("localhost", NULL, NULL, &ai))
				freeaddrinfo(ai);
			gethostbyname("localhost");
			gethostbyname2("localhost", AF_INET);
		} else if (!strcmp(mode, "fork")) {
			pid_t c = fork();

			if (c == 0)
				_exit(0);
			waitpid(c, NULL, 0);
		} else if (!strcmp(mode, "thread")) {
			pthread_t t;

			if (pthread_create(&t, NULL, wt_thread_main, NULL) || pthread_join(t, NULL))
				return 1;
		} else {
			fprintf(stderr, "tool_calls: unknown mode %s\n", mode);
			return 2;
		}
	}
	if (!strcmp(mode, "fork") && argc > 3) {
		struct timespec ts = { atol(argv[3]) / 1000, atol(argv[3]) % 1000 * 1000000 };

		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "tool_calls %s %d done %ld\n", mode, getpid(), n);
	return 0;
}
