/*
 * clock_count.c: counts a process's clock_gettime(CLOCK_MONOTONIC) calls per thread, for
 * scripts/fio-host-check.sh (LD_PRELOAD=clock_count.so fio ...). At exit it writes one line per
 * thread, in the order the threads first read the clock, to $CLOCK_COUNT_FILE (or stderr):
 * "thread K calls N". fio's own clock is clock_gettime(CLOCK_MONOTONIC) with
 * clocksource=clock_gettime, so the count of the job's thread is fio's clock reads plus the
 * engine's.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CC_THREADS 64

static pid_t cc_tid[CC_THREADS];
static unsigned long cc_calls[CC_THREADS];
static pthread_mutex_t cc_lock = PTHREAD_MUTEX_INITIALIZER;
static int (*cc_real)(clockid_t, struct timespec *);

int clock_gettime(clockid_t id, struct timespec *ts)
{
	if (!cc_real)
		cc_real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
	if (id == CLOCK_MONOTONIC) {
		pid_t me = gettid();
		pthread_mutex_lock(&cc_lock);
		for (int i = 0; i < CC_THREADS; i++) {
			if (!cc_tid[i])
				cc_tid[i] = me;
			if (cc_tid[i] == me) {
				cc_calls[i]++;
				break;
			}
		}
		pthread_mutex_unlock(&cc_lock);
	}
	return cc_real(id, ts);
}

__attribute__((destructor)) static void cc_report(void)
{
	const char *path = getenv("CLOCK_COUNT_FILE");
	FILE *f = path ? fopen(path, "w") : stderr;
	if (!f)
		return;
	for (int i = 0; i < CC_THREADS && cc_tid[i]; i++)
		fprintf(f, "thread %d calls %lu\n", i, cc_calls[i]);
	if (f != stderr)
		fclose(f);
}
