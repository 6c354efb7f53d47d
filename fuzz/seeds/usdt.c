/* Source of fuzz/corpus/usdt_notes/seed-notes-p{2,3}: two USDT probes, each with a semaphore.
 *   p2: cc -Os -nostdlib -static -fno-asynchronous-unwind-tables -Wl,--build-id=none -Wl,-z,norelro -Wl,-z,noseparate-code usdt.c
 *   p3: cc -Os -nostdlib -fPIE -pie -fno-asynchronous-unwind-tables -Wl,--build-id=none -Wl,-z,noseparate-code usdt.c
 * The seed files are a mode byte (0: notes, 2: symbol tables) followed by the ELF file. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
unsigned short p_sem_semaphore __attribute__((section(".probes")));
unsigned short p_tick_semaphore __attribute__((section(".probes")));
long counter;
void _start(void) {
    long x = 3;
    for (;;) {
        DTRACE_PROBE2(p, tick, x, &counter);
        if (p_sem_semaphore) DTRACE_PROBE1(p, sem, x);
        x++;
    }
}
