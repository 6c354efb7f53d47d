/* Sends itself SIGUSR1 five times and SIGUSR2 three times (handled), then prints its pid. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile int got;

static void on_signal(int sig)
{
	got += sig;
}

int main(void)
{
	signal(SIGUSR1, on_signal);
	signal(SIGUSR2, on_signal);
	for (int i = 0; i < 5; i++)
		kill(getpid(), SIGUSR1);
	for (int i = 0; i < 3; i++)
		kill(getpid(), SIGUSR2);
	printf("pid %d got %d\n", getpid(), got);
	return 0;
}
