/* A second thread sleeps (so it is switched out) and reports its tid; the process
 * prints "pid P tid T". Build with -pthread (glibc 2.34+ needs nothing extra). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pid_t tid;

static void *sleeper(void *arg)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	tid = gettid();
	for (int i = 0; i < 5; i++)
		nanosleep(&ts, NULL);
	return arg;
}

int main(void)
{
	pthread_t t;

	pthread_create(&t, NULL, sleeper, NULL);
	pthread_join(t, NULL);
	printf("pid %d tid %d\n", getpid(), tid);
	return 0;
}
