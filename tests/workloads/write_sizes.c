/* Writes to /dev/null: 300 writes of 100 bytes and 200 writes of 8192 bytes. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(void)
{
	static char buf[8192];
	int fd = open("/dev/null", O_WRONLY);

	for (int i = 0; i < 300; i++)
		write(fd, buf, 100);
	for (int i = 0; i < 200; i++)
		write(fd, buf, sizeof(buf));
	printf("small 300 large 200\n");
	return 0;
}
