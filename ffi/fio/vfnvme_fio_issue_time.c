/*
 * vfnvme_fio_issue_time.c: the issue time of each io_u, without a clock read per commit
 * (included by vfnvme_fio.c).
 *
 * fio (3.33) reads its clock five times per I/O with an asynchronous engine: the start time in
 * get_io_u, the loop's time cache, rate_ddir's "now" (even with no rate set), the completion
 * batch's time, and the issue time that this engine sets at commit (FIO_ASYNCIO_SETS_ISSUE_TIME).
 * Where fio's clock is clock_gettime on the hpet or acpi_pm clocksource (a guest on QEMU's
 * default CPU model), each read is a system call and a trapped register read behind QEMU's
 * global lock, tens of microseconds: the reads, not the device, set the IOPS.
 *
 * So the engine takes the issue time from fio's own start time plus the time from queue() to
 * the commit that handed the io_u to the driver, measured with the TSC (rdtsc: a few ns, no
 * lock). slat is then the engine's submission time; clat and lat keep fio's clock. The TSC rate
 * is measured once per process against CLOCK_MONOTONIC. Engine option tsc_issue_time=0, a job
 * without a start time (disable_lat) or one replaying an iolog, or a CPU without a TSC read
 * fio's clock at every commit instead.
 */

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define VF_HAVE_TSC 1
static inline uint64_t vf_ticks(void)
{
	return __rdtsc();
}
#else
#define VF_HAVE_TSC 0
static inline uint64_t vf_ticks(void)
{
	return 0;
}
#endif

/* How long the TSC rate is measured against CLOCK_MONOTONIC (once per process, asleep). */
#define VF_TSC_CALIBRATION_NS 20000000L
/* A queue-to-commit time longer than this is not believed (a thread moved between CPUs whose
 * TSCs differ): the batch then reads fio's clock. */
#define VF_TSC_MAX_SUBMIT_NS 1000000000ULL

/* Nanoseconds per TSC tick; 0 when the TSC is missing or its rate implausible. */
static double vf_tsc_ns_per_tick;
static pthread_once_t vf_tsc_once = PTHREAD_ONCE_INIT;

/* One CLOCK_MONOTONIC reading and the TSC at its middle (read before and after it). */
static void vf_tsc_sample(unsigned long long *ns, uint64_t *tick)
{
	uint64_t before = vf_ticks();
	*ns = vf_now_ns();
	uint64_t after = vf_ticks();
	*tick = before + (after - before) / 2;
}

static void vf_tsc_calibrate(void)
{
	if (!VF_HAVE_TSC)
		return;
	unsigned long long t0, t1;
	uint64_t c0, c1;
	vf_tsc_sample(&t0, &c0);
	struct timespec wait = { 0, VF_TSC_CALIBRATION_NS };
	while (nanosleep(&wait, &wait) && errno == EINTR)
		;
	vf_tsc_sample(&t1, &c1);
	if (t1 - t0 < VF_TSC_CALIBRATION_NS / 2)
		return;
	if (c1 <= c0)
		return;
	double ns_per_tick = (double)(t1 - t0) / (double)(c1 - c0);
	/* Between 100 MHz and 20 GHz. */
	if (ns_per_tick >= 0.05 && ns_per_tick <= 10.0)
		vf_tsc_ns_per_tick = ns_per_tick;
}

/* Whether this job's issue times come from the TSC (measures the TSC's rate on first use). */
static bool vf_tsc_issue_time_wanted(struct thread_data *td)
{
	const struct vf_options *o = td->eo;
	if ((o && !o->tsc_issue_time) || td->o.disable_lat || td->o.read_iolog_file)
		return false;
	pthread_once(&vf_tsc_once, vf_tsc_calibrate);
	return vf_tsc_ns_per_tick > 0;
}

/* Remembers when queue() took the io_u (for its issue time). */
static inline void vf_note_queued(const struct vf_thread *vt, struct vf_iou *e)
{
	if (vt->tsc_issue_time)
		e->queued_tick = vf_ticks();
}

/* t + ns. */
static void vf_timespec_add_ns(struct timespec *t, uint64_t ns)
{
	uint64_t nsec = (uint64_t)t->tv_nsec + ns;
	t->tv_sec += (time_t)(nsec / 1000000000ULL);
	t->tv_nsec = (long)(nsec % 1000000000ULL);
}

/* Sets the issue time of the io_us queued since the last commit: start time plus the TSC time
 * since queue() took each; false if a time is not believable (the caller reads fio's clock). */
static bool vf_issue_times_from_tsc(struct vf_thread *vt)
{
	uint64_t now = vf_ticks();
	for (unsigned int i = 0; i < vt->nqueued; i++) {
		struct io_u *io_u = vt->queued[i];
		const struct vf_iou *e = io_u->engine_data;
		uint64_t ticks = now >= e->queued_tick ? now - e->queued_tick : 0;
		double ns = (double)ticks * vf_tsc_ns_per_tick;
		if (ns > (double)VF_TSC_MAX_SUBMIT_NS)
			return false;
		io_u->issue_time = io_u->start_time;
		vf_timespec_add_ns(&io_u->issue_time, (uint64_t)ns);
	}
	return true;
}
