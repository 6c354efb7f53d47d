/* The marker workload of a tenant: CALLS getppid calls (argv[2]), OPENS opens of the
 * missing paths /tmp/wt-marker-TAG-i (argv[3]; each fails with ENOENT), and EXECS execs
 * of `/bin/true marker-TAG-i` (argv[4]), waiting for each, TAG being argv[1]. Prints to
 * stderr "TAG calls N opens N execs N" once done. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *tag = argc > 1 ? argv[1] : "x";
	long calls = argc > 2 ? atol(argv[2]) : 0, opens = argc > 3 ? atol(argv[3]) : 0;
	long execs = argc > 4 ? atol(argv[4]) : 0;
	char s[128];

	for (long i = 0; i < calls; i++)
		syscall(SYS_getppid);
	for (long i = 0; i < opens; i++) {
		snprintf(s, sizeof(s), "/tmp/wt-marker-%s-%ld", tag, i);
		if (open(s, O_RDONLY) >= 0)
			return 1;
	}
	for (long i = 0; i < execs; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			snprintf(s, sizeof(s), "marker-%s-%ld", tag, i);
			execl("/bin/true", "/bin/true", s, (char *)NULL);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, NULL, 0) != pid)
			return 1;
	}
	fprintf(stderr, "%s calls %ld opens %ld execs %ld\n", tag, calls, opens, execs);
	return 0;
}
