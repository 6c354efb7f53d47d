/* Calls getppid() forever (or for argv[1] seconds); a busy neighbour for filter tests. */
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	time_t end = time(NULL) + (argc > 1 ? atol(argv[1]) : 3600);

	while (time(NULL) < end)
		for (int i = 0; i < 10000; i++)
			syscall(SYS_getppid);
	return 0;
}
