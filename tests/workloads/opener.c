/* Opens files with a known outcome, all under a fresh directory D = /tmp/wt-opener-PID:
 * creat(2) of D/exists; K opens of D/exists (argv[1], default 10); J opens of missing
 * files (argv[2], default 4; ENOENT); C creates of D/new-i with O_WRONLY|O_CREAT|O_TRUNC
 * (argv[3], default 3); one append open of D/new-0 (O_WRONLY|O_CREAT|O_APPEND, like >>);
 * one legacy open(2); after chdir(D) a relative openat of "exists"; an open of D itself
 * (O_DIRECTORY) and an openat of "exists" relative to that dir fd; and an openat2 of the
 * relative, missing "missing-2x". Then it removes D. A pause of argv[4] ms (default 0)
 * sits between the K opens and the rest. Prints to stderr its pid, D, and the totals of
 * opens of paths under D: "create N open N success N fail N". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int create, opens, success, fail;

static void count(int creates, long fd)
{
	if (creates)
		create++;
	else
		opens++;
	if (fd >= 0) {
		success++;
		close(fd);
	} else {
		fail++;
	}
}

int main(int argc, char **argv)
{
	int k = argc > 1 ? atoi(argv[1]) : 10, j = argc > 2 ? atoi(argv[2]) : 4, c = argc > 3 ? atoi(argv[3]) : 3;
	int pause_ms = argc > 4 ? atoi(argv[4]) : 0;
	char dir[64], path[128];
	struct open_how how = { .flags = O_RDONLY };
	int dfd;

	snprintf(dir, sizeof(dir), "/tmp/wt-opener-%d", getpid());
	if (mkdir(dir, 0755))
		return 1;
	snprintf(path, sizeof(path), "%s/exists", dir);
	count(1, syscall(SYS_creat, path, 0644));
	for (int i = 0; i < k; i++)
		count(0, openat(AT_FDCWD, path, O_RDONLY));
	usleep(pause_ms * 1000);
	for (int i = 0; i < j; i++) {
		snprintf(path, sizeof(path), "%s/missing-%d", dir, i);
		count(0, openat(AT_FDCWD, path, O_RDONLY));
	}
	for (int i = 0; i < c; i++) {
		snprintf(path, sizeof(path), "%s/new-%d", dir, i);
		count(1, openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
	}
	snprintf(path, sizeof(path), "%s/new-0", dir);
	count(1, openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND, 0644));
	snprintf(path, sizeof(path), "%s/exists", dir);
	count(0, syscall(SYS_open, path, O_RDONLY));
	if (chdir(dir))
		return 1;
	count(0, openat(AT_FDCWD, "exists", O_RDONLY));
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	opens++;
	success++;
	count(0, openat(dfd, "exists", O_RDONLY));
	close(dfd);
	count(0, syscall(SYS_openat2, AT_FDCWD, "missing-2x", &how, sizeof(how)));
	fprintf(stderr, "pid %d\ndir %s\ncreate %d open %d success %d fail %d\n", getpid(), dir, create, opens, success, fail);
	for (int i = 0; i < c; i++) {
		snprintf(path, sizeof(path), "%s/new-%d", dir, i);
		unlink(path);
	}
	unlink("exists");
	if (chdir("/") || rmdir(dir))
		return 1;
	return 0;
}
