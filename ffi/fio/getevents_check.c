/*
 * getevents_check.c: drives the vfnvme fio engine's getevents() the way fio could but its own
 * loop never does (min > 0 with a timeout), which fio cannot be made to do from a job file.
 *
 * Plays the part of fio for one thread: loads the engine (dlopen), provides the five fio
 * functions it calls and fio's clock source variable, sets up one file on a model whose reads never complete (hang_reads=1),
 * queues one read, commits, then asks for 1 event with a 200 ms timeout. The engine must return
 * 0 events once the timeout runs out (an engine that ignores the timeout polls forever; the
 * caller runs this under `timeout`). A completion-free zero timeout must also return at once.
 *
 * Also, at iodepth 1 on a model that completes reads, queue() must hand the read back done
 * (FIO_Q_COMPLETED without error, the engine's inline completion) and tell fio it completed.
 *
 * Built and run by scripts/fio-host-check.sh: getevents_check ENGINE.so. Exits 0 on success.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fio.h"

/* The fio functions the engine uses (exported from this executable: link with -rdynamic). */
ssize_t log_err(const char *format, ...)
{
	va_list ap;
	va_start(ap, format);
	int n = vfprintf(stderr, format, ap);
	va_end(ap);
	return n;
}

ssize_t log_info(const char *format, ...)
{
	va_list ap;
	va_start(ap, format);
	int n = vfprintf(stderr, format, ap);
	va_end(ap);
	return n;
}

void fio_gettime(struct timespec *ts, void *caller)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
}

/* fio's clock: the TSC (the engine only reads it, to hint at a slow one). */
enum fio_cs fio_clock_source = CS_CPUCLOCK;

void io_u_queued(struct thread_data *td, struct io_u *io_u)
{
}

void io_u_mark_submit(struct thread_data *td, unsigned int nr)
{
}

static unsigned int marked_complete;

void io_u_mark_complete(struct thread_data *td, unsigned int nr)
{
	marked_complete += nr;
}

static double seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CHECK(cond, ...)                                                                       \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			fprintf(stderr, "getevents_check: FAIL: " __VA_ARGS__);                 \
			fprintf(stderr, "\n");                                                 \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

/* Sets up one fio thread of queue depth `depth` with one file `name`, and one 4 KiB read at offset
 * 0 of it into the thread's buffer (not yet queued). */
static struct io_u *one_read(struct ioengine_ops *ops, unsigned int depth, const char *name,
			     struct thread_data **tdp)
{
	struct thread_data *td = calloc(1, sizeof(*td));
	struct fio_file *f = calloc(1, sizeof(*f));
	struct fio_file **files = calloc(1, sizeof(*files));
	struct io_u *io_u = calloc(1, sizeof(*io_u));
	CHECK(td && f && files && io_u, "out of memory");
	td->o.use_thread = 1;
	td->o.iodepth = depth;
	td->o.td_ddir = TD_DDIR_READ;
	td->o.max_bs[DDIR_READ] = td->o.max_bs[DDIR_WRITE] = td->o.max_bs[DDIR_TRIM] = 4096;
	f->file_name = strdup(name);
	files[0] = f;
	td->files = files;
	td->files_index = 1;
	td->o.nr_files = 1;

	CHECK(ops->setup(td) == 0, "setup failed");
	CHECK(ops->init(td) == 0, "init failed");
	CHECK(ops->iomem_alloc(td, 4096) == 0, "iomem_alloc failed");
	CHECK(ops->io_u_init(td, io_u) == 0, "io_u_init failed");
	io_u->file = f;
	io_u->ddir = DDIR_READ;
	io_u->offset = 0;
	io_u->xfer_buf = td->orig_buffer;
	io_u->xfer_buflen = 4096;
	*tdp = td;
	return io_u;
}

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: getevents_check ENGINE.so");
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	CHECK(h, "dlopen %s: %s", argv[1], dlerror());
	struct ioengine_ops *ops = dlsym(h, "ioengine");
	CHECK(ops && ops->getevents, "no ioengine in %s", argv[1]);

	/* iodepth 1: each read comes back from queue() done, and fio is told it completed. */
	struct thread_data *td;
	struct io_u *io_u = one_read(ops, 1, "trtype=model ns=1 id=inline", &td);
	for (unsigned int i = 0; i < 100; i++) {
		io_u->offset = (unsigned long long)i * 4096;
		enum fio_q_status st = ops->queue(td, io_u);
		CHECK(st == FIO_Q_COMPLETED, "iodepth 1: read %u: queue returned %d, want %d "
		      "(FIO_Q_COMPLETED)", i, st, FIO_Q_COMPLETED);
		CHECK(io_u->error == 0, "iodepth 1: read %u failed: error %d", i, io_u->error);
	}
	CHECK(marked_complete == 100, "iodepth 1: %u of 100 reads marked complete", marked_complete);
	CHECK(ops->getevents(td, 0, 1, NULL) == 0, "iodepth 1: getevents found a completion left");
	fprintf(stderr, "getevents_check: iodepth 1: 100 reads completed inside queue()\n");

	/* iodepth 4, on a model whose reads never complete. */
	io_u = one_read(ops, 4, "trtype=model ns=1 id=hung hang_reads=1", &td);
	CHECK(ops->queue(td, io_u) == FIO_Q_QUEUED, "queue did not queue the read");
	CHECK(ops->commit(td) == 0, "commit failed");

	/* min 1, a 200 ms timeout: the read never completes, so 0 events after about 200 ms. */
	struct timespec t = { .tv_sec = 0, .tv_nsec = 200 * 1000 * 1000 };
	double start = seconds();
	int n = ops->getevents(td, 1, 1, &t);
	double took = seconds() - start;
	CHECK(n == 0, "getevents(min 1, 200 ms) returned %d, want 0", n);
	CHECK(took >= 0.2, "getevents returned after %.3f s, before its 200 ms timeout", took);
	fprintf(stderr, "getevents_check: min 1 with a 200 ms timeout: 0 events after %.3f s\n",
		took);

	/* A zero timeout polls once. */
	t.tv_nsec = 0;
	start = seconds();
	n = ops->getevents(td, 1, 1, &t);
	took = seconds() - start;
	CHECK(n == 0, "getevents(min 1, 0 ms) returned %d, want 0", n);
	fprintf(stderr, "getevents_check: min 1 with a zero timeout: 0 events after %.6f s\n",
		took);

	/* The read is still in flight: leave without the engine's cleanup (which would wait for it)
	 * and without its unload (which would refuse to close a controller with a queue pair). */
	fprintf(stderr, "getevents_check: PASS\n");
	fflush(stderr);
	_exit(0);
}
