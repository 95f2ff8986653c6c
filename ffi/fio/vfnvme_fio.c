/*
 * vfnvme_fio.c: fio ioengine over libvfnvme (userspace polled NVMe over VFIO).
 *
 * Load into fio with ioengine=external:/path/to/vfnvme_fio.so, thread=1.
 *
 * Filenames (one file = one namespace; several files may share a controller):
 *   trtype=PCIe traddr=0000.00.10.0 ns=1     SPDK's syntax ('.' or '\:' in traddr)
 *   0000.00.10.0/1                           short form (PCI address / nsid)
 *   trtype=model ns=1 [id=NAME] [namespaces=N] [lba_size=B] [blocks=N] [latency_ns=T]
 *                [seed=S] [backing=ram|null] [hang_reads=0|1] [metadata_size=B]
 *                [metadata_extended=0|1] [protection_type=0..3] [protection_first=0|1]
 *                                            the in-memory controller model (host tests)
 * fio splits filenames at ':' unless escaped, so write PCI addresses with '.' or '\:'.
 *
 * Engine options (fio's options table, listed by `fio --enghelp=PATH/vfnvme_fio.so`, without
 * external:): every filename key is also a job option (--trtype=model --ns=2 ...), plus
 * admin_timeout_ms, io_timeout_ms, io_retries, no_iommu, reset_after_ms (a test hook),
 * defer_sq_doorbell, tsc_issue_time, inline_qd1 and enable_sgl. The options are the job's defaults; a key in a filename
 * overrides them for that file. With trtype given as an option, a filename that is neither
 * key=value nor a short form (fio uses the job name when there is no filename) only names the
 * file: the target comes from the options.
 *
 * One controller per traddr (or model id) is shared by every file and thread of the process;
 * each fio thread gets one queue pair per controller it uses. Namespace events (attach, detach,
 * resize) are reaped by one admin poller thread per controller, running while a fio thread uses
 * the controller; the I/O threads never touch the admin queue.
 *
 * Doorbells: queue() only queues; commit() hands the batch to the driver, whose queue pair is
 * allocated with defer_sq_doorbell (SPDK's delay_cmd_submit): the driver writes the doorbell
 * only once half of what is in flight waits for it (always when the device would otherwise
 * idle), and every poll rings what is left. getevents() polls only when it has nothing left to
 * hand out: one poll reaps every completion the device has posted into a ready ring, and the
 * next calls are served from that ring. At most one doorbell per batch, never one per I/O.
 * At iodepth 1, queue() rings and polls until its I/O is done and returns it completed
 * (inline_qd1), as fio's synchronous engines do.
 * getevents() honours fio's timeout: with one, it returns what completed when it runs out; without
 * one it polls until min events are ready, or fails with -EIO when the controller reports an
 * error. Buffers come from the driver's DMA memory (iomem_alloc), so I/O is zero-copy; a file on
 * a controller other than the one that provided the thread's memory goes through per-io_u
 * bounce buffers.
 *
 * A failed I/O is EIO for fio; the engine also prints its NVMe status on stderr (sct, sc, dnr,
 * more and a name for the common ones, e.g. "sct 0x2 sc 0x81 ...: Unrecovered Read Error"), for
 * the first VF_ERROR_REPORTS failures of each thread.
 *
 * Per I/O the engine makes one submit call (the data pointer is range-checked against the
 * thread's iomem, no translation call) and shares one vfnvme_qpair_poll_completions call per
 * batch of completions (no callbacks); it counts commands in flight itself.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fio.h"
#include "optgroup.h"

#include "vfnvme.h"

#include "vfnvme_fio.h"

#include "vfnvme_fio_issue_time.c"

static void vf_ready_push(struct vf_thread *vt, struct io_u *io_u);
static void vf_mark_issued(struct thread_data *td, struct vf_thread *vt);
static bool vf_complete_inline(struct thread_data *td, struct vf_thread *vt);

pthread_mutex_t vf_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vf_ctrl vf_ctrls[VF_MAX_CTRLS];

void vf_log_rc(const char *what, int rc)
{
	log_err("vfnvme: %s failed: %s (%s)\n", what, vfnvme_strerror(rc), vfnvme_last_error());
}

static int vf_parse_u64(const char *v, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 0);
	if (errno || end == v || *end)
		return -1;
	*out = x;
	return 0;
}

/* Canonical PCI address "dddd:bb:dd.f" from "dddd.bb.dd.f", "dddd:bb:dd.f" or with '\:'. */
int vf_canon_pci(const char *in, char *out, size_t len)
{
	char tmp[64];
	size_t j = 0;
	for (size_t i = 0; in[i] && j + 1 < sizeof(tmp); i++)
		if (in[i] != '\\')
			tmp[j++] = in[i];
	tmp[j] = 0;
	unsigned int d, b, s, f;
	char c1, c2, c3, extra;
	if (sscanf(tmp, "%x%c%x%c%x%c%x%c", &d, &c1, &b, &c2, &s, &c3, &f, &extra) != 7)
		return -1;
	if ((c1 != ':' && c1 != '.') || (c2 != ':' && c2 != '.') || c3 != '.' || d > 0xffff ||
	    b > 0xff || s > 31 || f > 7)
		return -1;
	snprintf(out, len, "%04x:%02x:%02x.%x", d, b, s, f);
	return 0;
}

/* Model: one key of the namespaces' metadata format (metadata_size=B, metadata_extended=0|1,
 * protection_type=0..3, protection_first=0|1). 0, or -1 after logging what is wrong. */
static int vf_set_md_key(struct vf_target *t, const char *what, const char *k, const char *v)
{
	uint64_t x;
	if (vf_parse_u64(v, &x) || x > 0xffff) {
		log_err("vfnvme: %s: value of '%s' is not a number\n", what, k);
		return -1;
	}
	if (!strcasecmp(k, "metadata_size")) {
		t->mopts.metadata_size = (uint16_t)x;
		return 0;
	}
	if (!strcasecmp(k, "protection_type")) {
		if (x > 3) {
			log_err("vfnvme: %s: protection_type must be 0 to 3\n", what);
			return -1;
		}
		t->mopts.protection_type = (uint8_t)x;
		return 0;
	}
	if (x > 1) {
		log_err("vfnvme: %s: %s must be 0 or 1\n", what, k);
		return -1;
	}
	if (!strcasecmp(k, "metadata_extended"))
		t->mopts.metadata_extended = x;
	else
		t->mopts.protection_first = x;
	return 0;
}

/*
 * Sets one key of t (from a filename or, with `opt` set, from the options table) to the text v.
 * Returns 0, or -1 after logging what is wrong with it.
 */
static int vf_set_key(struct vf_target *t, const char *name, const char *k, const char *v, int opt)
{
	char what[600];
	if (opt)
		snprintf(what, sizeof(what), "option %s", k);
	else
		snprintf(what, sizeof(what), "filename '%s'", name);
	uint64_t x = 0;
	if (!strcasecmp(k, "trtype")) {
		t->have_trtype = 1;
		if (!strcasecmp(v, "pcie"))
			t->model = 0;
		else if (!strcasecmp(v, "model"))
			t->model = 1;
		else {
			log_err("vfnvme: %s: trtype must be PCIe or model\n", what);
			return -1;
		}
	} else if (!strcasecmp(k, "traddr") && strchr(v, '+')) {
		t->have_traddr = 1;
		if (vf_mp_parse_traddr(t, what, v))
			return -1;
	} else if (!strcasecmp(k, "subnqn")) {
		t->have_traddr = 1;
		t->mp = 1;
		size_t j = 0;
		for (size_t i = 0; v[i] && j + 1 < sizeof(t->subnqn); i++)
			if (v[i] != '\\')
				t->subnqn[j++] = v[i];
		t->subnqn[j] = 0;
	} else if (!strcasecmp(k, "traddr")) {
		t->have_traddr = 1;
		if (vf_canon_pci(v, t->traddr, sizeof(t->traddr))) {
			log_err("vfnvme: %s: bad traddr '%s' (use 0000.00.10.0)\n", what, v);
			return -1;
		}
	} else if (!strcasecmp(k, "id")) {
		snprintf(t->id, sizeof(t->id), "%s", v);
	} else if (!strcasecmp(k, "backing")) {
		if (!strcasecmp(v, "null"))
			t->mopts.null_data = true;
		else if (!strcasecmp(v, "ram"))
			t->mopts.null_data = false;
		else {
			log_err("vfnvme: %s: backing must be ram or null\n", what);
			return -1;
		}
	} else if (!strcasecmp(k, "hang_reads")) {
		if (strcmp(v, "0") && strcmp(v, "1")) {
			log_err("vfnvme: %s: hang_reads must be 0 or 1\n", what);
			return -1;
		}
		t->mopts.hang_reads = v[0] == '1';
	} else {
		uint32_t *u32 = NULL;
		uint64_t *u64 = NULL;
		if (!strcasecmp(k, "ns"))
			u32 = &t->nsid;
		else if (!strcasecmp(k, "namespaces"))
			u32 = &t->mopts.namespaces;
		else if (!strcasecmp(k, "lba_size"))
			u32 = &t->mopts.lba_size;
		else if (!strcasecmp(k, "latency_ns"))
			u32 = &t->mopts.latency_ns;
		else if (!strcasecmp(k, "blocks"))
			u64 = &t->mopts.blocks;
		else if (!strcasecmp(k, "seed"))
			u64 = &t->mopts.seed;
		else if (!strcasecmp(k, "paths"))
			u32 = &t->model_paths;
		else if (!strcasecmp(k, "metadata_size") || !strcasecmp(k, "metadata_extended") ||
			 !strcasecmp(k, "protection_type") || !strcasecmp(k, "protection_first"))
			return vf_set_md_key(t, what, k, v);
		else {
			log_err("vfnvme: filename '%s': unknown key '%s' (known: trtype traddr subnqn "
				"ns id namespaces lba_size blocks latency_ns seed backing hang_reads "
				"paths metadata_size metadata_extended protection_type protection_first)\n", name, k);
			return -1;
		}
		if (vf_parse_u64(v, &x) || (u32 && x > 0xffffffffu)) {
			log_err("vfnvme: %s: value of '%s' is not a number\n", what, k);
			return -1;
		}
		if (u32 == &t->nsid && x == 0) {
			log_err("vfnvme: %s: ns must be 1 or more\n", what);
			return -1;
		}
		if (u32)
			*u32 = (uint32_t)x;
		else
			*u64 = x;
		if (u32 == &t->model_paths)
			t->mp = x > 0;
	}
	return 0;
}

/* The job's options (td->eo) as t's defaults; a filename's keys then override them. */
static int vf_apply_options(const struct vf_options *o, struct vf_target *t)
{
	if (!o)
		return 0;
	if (o->trtype && *o->trtype && vf_set_key(t, "", "trtype", o->trtype, 1))
		return -1;
	if (o->traddr && *o->traddr && vf_set_key(t, "", "traddr", o->traddr, 1))
		return -1;
	if (o->id && *o->id)
		snprintf(t->id, sizeof(t->id), "%s", o->id);
	if (o->backing && *o->backing && vf_set_key(t, "", "backing", o->backing, 1))
		return -1;
	if (o->ns)
		t->nsid = o->ns;
	t->mopts.hang_reads = o->hang_reads != 0;
	t->mopts.namespaces = o->namespaces;
	t->mopts.lba_size = o->lba_size;
	t->mopts.blocks = o->blocks;
	t->mopts.latency_ns = o->latency_ns;
	t->mopts.seed = o->seed;
	t->admin_timeout_ms = o->admin_timeout_ms;
	t->no_iommu = o->no_iommu != 0;
	t->io_timeout_ms = o->io_timeout_ms;
	t->mopts.io_timeout_ms = o->io_timeout_ms;
	t->io_retries = o->io_retries;
	t->reset_after_ms = o->reset_after_ms;
	t->mopts.io_retries = o->io_retries;
	if (o->paths) {
		t->model_paths = o->paths;
		t->mp = 1;
	}
	return 0;
}

static int vf_parse_filename(const char *name, const struct vf_options *o, struct vf_target *t)
{
	memset(t, 0, sizeof(*t));
	t->mopts.size = sizeof(t->mopts);
	t->nsid = 1;
	snprintf(t->id, sizeof(t->id), "0");
	if (vf_apply_options(o, t))
		return -1;
	if (!strchr(name, '=')) {
		/* Short form: ADDR[/NSID] or model[/NSID]; with trtype set as an option, any other
		 * name (fio's job name when the job gives no filename) is just a label. */
		char addr[64];
		snprintf(addr, sizeof(addr), "%s", name);
		char *slash = strchr(addr, '/');
		if (slash) {
			uint64_t ns;
			*slash = 0;
			if (vf_parse_u64(slash + 1, &ns) || ns == 0 || ns > 0xffffffffu) {
				log_err("vfnvme: bad namespace id in filename '%s'\n", name);
				return -1;
			}
			t->nsid = (uint32_t)ns;
		}
		if (!strcmp(addr, "model")) {
			t->model = 1;
			return 0;
		}
		if (!vf_canon_pci(addr, t->traddr, sizeof(t->traddr))) {
			t->model = 0;
			return 0;
		}
		if (t->have_trtype && !slash)
			goto check;
		log_err("vfnvme: filename '%s' is neither 'trtype=... traddr=... ns=N' nor "
			"'0000.00.10.0/1' (nor a label with --trtype given as an option)\n", name);
		return -1;
	}

	char buf[512];
	snprintf(buf, sizeof(buf), "%s", name);
	char *save = NULL;
	for (char *tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq) {
			log_err("vfnvme: filename '%s': '%s' is not key=value\n", name, tok);
			return -1;
		}
		*eq = 0;
		if (vf_set_key(t, name, tok, eq + 1, 0))
			return -1;
	}
check:
	if (!t->have_trtype) {
		log_err("vfnvme: filename '%s': trtype=PCIe or trtype=model is missing (in the "
			"filename or as the trtype option)\n", name);
		return -1;
	}
	if (!t->model && !t->have_traddr) {
		log_err("vfnvme: filename '%s': traddr=0000.00.10.0 is missing (in the filename or as "
			"the traddr option)\n", name);
		return -1;
	}
	return 0;
}

/* Finds or opens the controller of a target. Call with vf_lock held. */
static struct vf_ctrl *vf_ctrl_get(const struct vf_target *t)
{
	char key[VF_KEY_LEN];
	if (t->model)
		snprintf(key, sizeof(key), "model:%s", t->id);
	else
		snprintf(key, sizeof(key), "pcie:%s", t->traddr);
	struct vf_ctrl *freeslot = NULL;
	for (int i = 0; i < VF_MAX_CTRLS; i++) {
		if (vf_ctrls[i].ctrl && !strcmp(vf_ctrls[i].key, key))
			return &vf_ctrls[i];
		if (!vf_ctrls[i].ctrl && !freeslot)
			freeslot = &vf_ctrls[i];
	}
	if (!freeslot) {
		log_err("vfnvme: more than %d controllers in one fio process\n", VF_MAX_CTRLS);
		return NULL;
	}
	struct vfnvme_ctrl *ctrl = NULL;
	struct vfnvme_ctrl_opts copts = { .size = sizeof(copts),
					  .admin_timeout_ms = t->admin_timeout_ms,
					  .io_timeout_ms = t->io_timeout_ms,
					  .io_retries = t->io_retries,
					  .no_iommu = t->no_iommu };
	int rc = t->model ? vfnvme_ctrl_open_model(&t->mopts, &ctrl)
			  : vfnvme_ctrl_open(t->traddr, &copts, &ctrl);
	if (rc) {
		log_err("vfnvme: opening %s failed: %s (%s)\n", key, vfnvme_strerror(rc),
			vfnvme_last_error());
		return NULL;
	}
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca) || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
	    pthread_cond_init(&freeslot->poller_wake, &ca)) {
		log_err("vfnvme: %s: can't set up the admin poller's condition variable\n", key);
		vfnvme_ctrl_close(ctrl);
		return NULL;
	}
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&freeslot->poller_lock, NULL);
	snprintf(freeslot->key, sizeof(freeslot->key), "%s", key);
	freeslot->ctrl = ctrl;
	freeslot->reset_after_ms = t->reset_after_ms;
	freeslot->reset_done = 0;
	freeslot->opened_ns = vf_now_ns();
	freeslot->users = 0;
	freeslot->poller_running = 0;
	atomic_store(&freeslot->failed, 0);
	return freeslot;
}

/*
 * The admin poller: reaps the controller's asynchronous events (namespaces attached, detached or
 * resized while the job runs). The driver rescans what changed; the engine reports each change
 * once. I/O to a namespace that went away then fails with an error instead of reaching the
 * device. vfnvme_ctrl_process_admin and vfnvme_ctrl_next_event are thread-safe (the admin queue
 * and the event list are behind their own locks), so this runs beside the I/O threads.
 */
static void vf_admin_poll(struct vf_ctrl *c)
{
	if (c->reset_after_ms && !c->reset_done &&
	    vf_now_ns() - c->opened_ns >= (unsigned long long)c->reset_after_ms * 1000000ULL) {
		c->reset_done = 1;
		log_info("vfnvme: %s: resetting the controller (reset_after_ms)\n", c->key);
		int rrc = vfnvme_ctrl_reset(c->ctrl);
		if (rrc)
			log_err("vfnvme: %s: vfnvme_ctrl_reset: %s (%s)\n", c->key,
				vfnvme_strerror(rrc), vfnvme_last_error());
	}
	static const char *what[] = { "none", "added", "removed", "changed" };
	int rc = vfnvme_ctrl_process_admin(c->ctrl);
	if (rc < 0) {
		if (!atomic_exchange(&c->failed, 1))
			log_err("vfnvme: %s: the controller reported an error; I/O waiting on it fails "
				"with EIO: vfnvme_ctrl_process_admin: %s (%s)\n",
				c->key, vfnvme_strerror(rc), vfnvme_last_error());
		return;
	}
	struct vfnvme_ns_event ev;
	while (vfnvme_ctrl_next_event(c->ctrl, &ev) == 1) {
		unsigned int k = (unsigned int)ev.kind;
		log_info("vfnvme: %s: namespace %u %s\n", c->key, ev.nsid,
			 k < sizeof(what) / sizeof(what[0]) ? what[k] : "?");
	}
	/* Recovery: timeouts, Aborts, resets, failure and removal, each reported once. */
	static const char *cwhat[] = { "none", "I/O command timed out", "Abort sent",
				       "reset started", "reset done", "controller failed",
				       "controller removed" };
	struct vfnvme_ctrl_event cev;
	while (vfnvme_ctrl_next_ctrl_event(c->ctrl, &cev) == 1) {
		unsigned int k = (unsigned int)cev.kind;
		log_info("vfnvme: %s: %s (queue %u, command %u)\n", c->key,
			 k < sizeof(cwhat) / sizeof(cwhat[0]) ? cwhat[k] : "?", cev.qid, cev.cid);
	}
}

static void *vf_admin_poller(void *arg)
{
	struct vf_ctrl *c = arg;
	pthread_mutex_lock(&c->poller_lock);
	while (!c->poller_stop) {
		pthread_mutex_unlock(&c->poller_lock);
		vf_admin_poll(c);
		pthread_mutex_lock(&c->poller_lock);
		if (c->poller_stop)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)VF_ADMIN_POLL_MS * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&c->poller_wake, &c->poller_lock, &ts);
	}
	pthread_mutex_unlock(&c->poller_lock);
	return NULL;
}

/* A fio thread starts using c: the first one starts its admin poller. Call with vf_lock held. */
static int vf_ctrl_use(struct vf_ctrl *c)
{
	if (c->users++ || c->poller_running)
		return 0;
	c->poller_stop = 0;
	int rc = pthread_create(&c->poller, NULL, vf_admin_poller, c);
	if (rc) {
		c->users--;
		log_err("vfnvme: %s: starting the admin poller thread: %s\n", c->key, strerror(rc));
		return -1;
	}
	c->poller_running = 1;
	return 0;
}

/* Stops and joins c's admin poller. Call with vf_lock held. */
static void vf_poller_stop(struct vf_ctrl *c)
{
	if (!c->poller_running)
		return;
	pthread_mutex_lock(&c->poller_lock);
	c->poller_stop = 1;
	pthread_cond_signal(&c->poller_wake);
	pthread_mutex_unlock(&c->poller_lock);
	pthread_join(c->poller, NULL);
	c->poller_running = 0;
}

/*
 * A fio thread is done with c: the last one stops its admin poller. A controller that failed or
 * was removed (hot removal: the kernel waits for the process to let go of the device) is closed
 * then, so that the kernel's removal completes while fio goes on with its other controllers;
 * a job that starts on it later fails in init. Call with vf_lock held.
 */
static void vf_ctrl_unuse(struct vf_ctrl *c)
{
	if (!c->users || --c->users != 0)
		return;
	vf_poller_stop(c);
	if (!atomic_load(&c->failed) || !c->ctrl)
		return;
	int rc = vfnvme_ctrl_close(c->ctrl);
	if (rc) {
		/* A queue pair was left allocated (a command never completed): keep it until the
		 * engine is unloaded, which tries again. */
		vf_log_rc("vfnvme_ctrl_close of a failed or removed controller", rc);
		return;
	}
	log_err("vfnvme: %s: released the failed or removed controller\n", c->key);
	c->ctrl = NULL;
	pthread_cond_destroy(&c->poller_wake);
	pthread_mutex_destroy(&c->poller_lock);
}

/*
 * Controllers and per-file data live until the engine is unloaded (the last fio thread closes
 * it): fio frees its files before the engine's cleanup runs, so they can't be released there.
 */
struct vf_file *vf_files_list[4096];
unsigned int vf_nfiles;

struct vf_file *vf_file_new(void)
{
	struct vf_file *vf = vf_nfiles < 4096 ? calloc(1, sizeof(*vf)) : NULL;
	if (!vf) {
		log_err("vfnvme: too many files\n");
		return NULL;
	}
	vf_files_list[vf_nfiles++] = vf;
	return vf;
}

__attribute__((destructor)) static void vf_unload(void)
{
	vf_mp_unload();
	pthread_mutex_lock(&vf_lock);
	for (int i = 0; i < VF_MAX_CTRLS; i++) {
		if (!vf_ctrls[i].ctrl)
			continue;
		vf_poller_stop(&vf_ctrls[i]);
		/* On the model, report how many doorbell writes the run took (tests check the
		 * batching with it). fio's own output is closed by now: stderr. */
		struct vfnvme_model_stats ms;
		if (vfnvme_ctrl_model_stats(vf_ctrls[i].ctrl, &ms) == 0)
			fprintf(stderr,
				"vfnvme: %s: %llu I/O commands, %llu SQ doorbell writes, %llu CQ "
				"doorbell writes\n",
				vf_ctrls[i].key, (unsigned long long)ms.io_commands,
				(unsigned long long)ms.sq_doorbell_writes,
				(unsigned long long)ms.cq_doorbell_writes);
		struct vfnvme_ctrl_info info;
		if (vfnvme_ctrl_info(vf_ctrls[i].ctrl, &info) == 0 && info.io_retries)
			fprintf(stderr, "vfnvme: %s: %llu I/O commands retried\n", vf_ctrls[i].key,
				(unsigned long long)info.io_retries);
		int rc = vfnvme_ctrl_close(vf_ctrls[i].ctrl);
		if (rc)
			vf_log_rc("vfnvme_ctrl_close", rc);
		vf_ctrls[i].ctrl = NULL;
		pthread_cond_destroy(&vf_ctrls[i].poller_wake);
		pthread_mutex_destroy(&vf_ctrls[i].poller_lock);
	}
	for (unsigned int i = 0; i < vf_nfiles; i++)
		free(vf_files_list[i]);
	vf_nfiles = 0;
	pthread_mutex_unlock(&vf_lock);
}

/* Attaches every file of the job to its namespace (idempotent): sets sizes. */
static int vf_attach_files(struct thread_data *td)
{
	struct fio_file *f;
	unsigned int i;
	int ret = 0;

	if (!td->o.use_thread) {
		log_err("vfnvme: the vfnvme engine needs thread=1 (controllers and DMA memory are "
			"per process); add --thread=1 or thread=1 to the job\n");
		return 1;
	}
	pthread_mutex_lock(&vf_lock);
	for_each_file(td, f, i) {
		if (FILE_ENG_DATA(f))
			continue;
		struct vf_target t;
		if (vf_parse_filename(f->file_name, td->eo, &t)) {
			ret = 1;
			break;
		}
		if (t.mp) {
			if (vf_mp_attach_file(td, f, &t)) {
				ret = 1;
				break;
			}
			continue;
		}
		struct vf_ctrl *c = vf_ctrl_get(&t);
		if (!c) {
			ret = 1;
			break;
		}
		struct vfnvme_ns_info info;
		int rc = vfnvme_ctrl_namespace(c->ctrl, t.nsid, &info);
		if (rc) {
			log_err("vfnvme: %s: namespace %u: %s (%s)\n", f->file_name, t.nsid,
				vfnvme_strerror(rc), vfnvme_last_error());
			ret = 1;
			break;
		}
		struct vf_file *vf = vf_file_new();
		if (!vf) {
			ret = 1;
			break;
		}
		vf->c = c;
		vf->nsid = t.nsid;
		vf->lba_size = info.lba_size;
		vf->lba_shift = __builtin_ctz(info.lba_size);
		vf->blocks = info.blocks;
		/* Formats with metadata or PI go through vfnvme_fio_md.c (fio sees data only). */
		vf->info = info;
		vf->has_md = info.metadata_size || info.protection_type;
		FILE_SET_ENG_DATA(f, vf);
		f->real_file_size = info.blocks * info.lba_size;
		f->filetype = FIO_TYPE_BLOCK;
		fio_file_set_size_known(f);
	}
	pthread_mutex_unlock(&vf_lock);
	return ret;
}

static int vf_setup(struct thread_data *td)
{
	return vf_attach_files(td);
}

static struct vf_tq *vf_tq_of(struct vf_thread *vt, struct vf_ctrl *c)
{
	for (int i = 0; i < vt->ntq; i++)
		if (vt->tq[i].c == c)
			return &vt->tq[i];
	return NULL;
}

/* Seconds since an arbitrary start, on the monotonic clock. */
double vf_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Drains and frees the thread's queue pairs. */
static void vf_qp_cleanup(struct thread_data *td, struct vf_thread *vt)
{
	for (int i = 0; i < vt->ntq; i++) {
		struct vf_tq *tq = &vt->tq[i];
		/* Drain what is still in flight (fio is done with those io_us), then free the queue
		 * pair; a command that never completes leaves it allocated. On a controller that
		 * failed or was removed the driver ends every command with "controller lost" at one
		 * of the next polls, so the drain ends too. */
		if (tq->qp && vf_drain(vt, tq->qp, &tq->inflight)) {
			log_err("vfnvme: %s: %u command(s) still in flight at cleanup; leaving "
				"their queue pair and buffers allocated\n",
				tq->c->key, vfnvme_qpair_outstanding(tq->qp));
		} else {
			if (tq->bounce) {
				for (unsigned int j = 0; j < vt->depth; j++)
					vfnvme_dma_free(tq->c->ctrl, tq->bounce[j]);
				free(tq->bounce);
			}
			int rc = vfnvme_qpair_free(tq->qp);
			if (rc)
				vf_log_rc("vfnvme_qpair_free", rc);
		}
		pthread_mutex_lock(&vf_lock);
		vf_ctrl_unuse(tq->c);
		pthread_mutex_unlock(&vf_lock);
	}
	vt->ntq = 0;
}

static void vf_cleanup(struct thread_data *td)
{
	struct vf_thread *vt = td->io_ops_data;
	if (vt) {
		vt->be->cleanup(td, vt);
		free(vt->events);
		free(vt->ready);
		free(vt->queued);
		free(vt->cpls);
		free(vt);
		td->io_ops_data = NULL;
	}
}

/* Once per process: fio times every I/O with its own clock. When that clock is a system call
 * into a kernel clocksource the vDSO can't read (hpet, acpi_pm: e.g. a guest on QEMU's default
 * CPU model, or a host whose TSC the kernel distrusts), fio's clock reads, not the device or
 * this engine, bound the IOPS (each may also wait for the hypervisor). Say so, and what avoids
 * it. */
static void vf_clock_hint(void)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;
	if (fio_clock_source == CS_CPUCLOCK || atomic_flag_test_and_set(&said))
		return;
	char cs[32] = "";
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
	if (!f)
		return;
	if (!fgets(cs, sizeof(cs), f))
		cs[0] = 0;
	fclose(f);
	cs[strcspn(cs, "\n")] = 0;
	if (strcmp(cs, "hpet") && strcmp(cs, "acpi_pm"))
		return;
	log_info("vfnvme: fio reads its clock through a system call to the kernel's %s clocksource, "
		 "at least once per I/O: that, not the device or this engine, can bound the IOPS here. "
		 "fio's TSC clock avoids it: clocksource=cpu\n", cs);
}

static int vf_init(struct thread_data *td)
{
	struct fio_file *f;
	unsigned int i;

	vf_clock_hint();

	if (vf_attach_files(td))
		return 1;
	struct vf_thread *vt = calloc(1, sizeof(*vt));
	if (!vt)
		return 1;
	td->io_ops_data = vt;
	vt->be = &vf_qpair_backend;
	vt->depth = td->o.iodepth ? td->o.iodepth : 1;
	vt->max_bs = td_max_bs(td);
	vt->tsc_issue_time = vf_tsc_issue_time_wanted(td);
	vt->complete_inline = vt->depth == 1 && (!td->eo || ((struct vf_options *)td->eo)->inline_qd1);
	vt->events = calloc(vt->depth, sizeof(*vt->events));
	vt->ready = calloc(vt->depth, sizeof(*vt->ready));
	vt->queued = calloc(vt->depth, sizeof(*vt->queued));
	vt->cpls = calloc(vt->depth, sizeof(*vt->cpls));
	if (!vt->events || !vt->ready || !vt->queued || !vt->cpls)
		goto fail;
	unsigned int heads = 0, nfiles = 0;
	for_each_file(td, f, i) {
		nfiles++;
		heads += ((struct vf_file *)FILE_ENG_DATA(f))->s != NULL;
	}
	if (heads) {
		if (heads != nfiles) {
			log_err("vfnvme: a job's files are either all multipath heads or all "
				"controller namespaces; put them in separate jobs\n");
			goto fail;
		}
		if (vf_mp_init(td, vt))
			goto fail;
		return 0;
	}
	for_each_file(td, f, i) {
		struct vf_file *vf = FILE_ENG_DATA(f);
		if (vf_tq_of(vt, vf->c))
			continue;
		struct vf_tq *tq = &vt->tq[vt->ntq];
		if (!vf->c->ctrl) {
			log_err("vfnvme: %s: the controller failed or was removed, and was released "
				"when the jobs using it ended\n", f->file_name);
			goto fail;
		}
		struct vfnvme_ctrl_info ci;
		int rc = vfnvme_ctrl_info(vf->c->ctrl, &ci);
		if (rc) {
			vf_log_rc("vfnvme_ctrl_info", rc);
			goto fail;
		}
		/* An I/O above the transfer limit is split into several commands, each taking an
		 * entry; a ring of N entries holds N - 1 commands. Twice the commands in flight, so
		 * the driver can write the CQ head doorbell after the SQ doorbell of the
		 * resubmissions (it only defers it while the CQ keeps room for them). */
		unsigned long long per_io = ci.max_transfer ? (vt->max_bs + ci.max_transfer - 1) /
							      ci.max_transfer : 1;
		unsigned long long qd = 2 * vt->depth * (per_io ? per_io : 1) + 1;
		if (qd < VF_MIN_RING)
			qd = VF_MIN_RING;
		if (ci.max_queue_depth && qd > ci.max_queue_depth)
			qd = ci.max_queue_depth;
		/* The driver batches doorbells (see the top of this file). */
		const struct vf_options *o = td->eo;
		struct vfnvme_qpair_opts qo = {
			.size = sizeof(qo),
			.depth = (uint32_t)qd,
			.defer_sq_doorbell = !o || o->defer_sq_doorbell,
			.prefer_sgl = o && o->enable_sgl,
		};
		rc = vfnvme_qpair_alloc_opts(vf->c->ctrl, &qo, &tq->qp);
		if (rc) {
			log_err("vfnvme: %s: allocating a queue pair of depth %llu: %s (%s)\n",
				f->file_name, qd, vfnvme_strerror(rc), vfnvme_last_error());
			goto fail;
		}
		if (qo.prefer_sgl)
			log_info("vfnvme: %s: enable_sgl=1: %s\n", f->file_name,
				 vfnvme_qpair_uses_sgl(tq->qp) == 1 ?
					 "every read and write goes with SGLs" :
					 "the controller has no SGL support (Identify Controller "
					 "SGLS); PRPs are used");
		pthread_mutex_lock(&vf_lock);
		rc = vf_ctrl_use(vf->c);
		pthread_mutex_unlock(&vf_lock);
		if (rc) {
			vfnvme_qpair_free(tq->qp);
			tq->qp = NULL;
			goto fail;
		}
		tq->c = vf->c;
		vt->ntq++;
	}
	if (vt->ntq)
		vt->mem_ctrl = vt->tq[0].c;
	if (vf_md_init(td, vt))
		goto fail;
	return 0;
fail:
	vf_cleanup(td);
	return 1;
}

/* The largest DMA buffer of the no-IOMMU mode: one 2 MiB hugepage. */
#define VF_NOIOMMU_PAGE ((size_t)2 << 20)

static int vf_qp_iomem_alloc(struct thread_data *td, struct vf_thread *vt, size_t total_mem)
{
	if (!vt->mem_ctrl) {
		log_err("vfnvme: iomem_alloc before init (no controller)\n");
		return 1;
	}
	void *p = NULL;
	int rc = vfnvme_dma_alloc(vt->mem_ctrl->ctrl, total_mem, &p, NULL);
	if (rc && td->eo && ((struct vf_options *)td->eo)->no_iommu && total_mem > VF_NOIOMMU_PAGE &&
	    posix_memalign(&p, 4096, total_mem) == 0) {
		/* No-IOMMU mode: a DMA buffer lies in one hugepage (physical addresses are contiguous
		 * only there). fio's buffers (iodepth x largest block) that do not fit one go to
		 * ordinary memory, and each I/O through a DMA bounce buffer of its own (vf_data): a
		 * copy per I/O instead of a refusal. */
		log_err("vfnvme: no-IOMMU mode: fio's %zu bytes of I/O buffers do not fit one DMA "
			"hugepage (%s); each I/O goes through a bounce buffer (one copy): lower iodepth "
			"or bs for zero-copy I/O\n",
			total_mem, vfnvme_last_error());
		td->orig_buffer = p;
		vt->mem_start = vt->mem_end = 0;
		vt->mem_heap = true;
		return 0;
	}
	if (rc) {
		log_err("vfnvme: allocating %zu bytes of DMA memory: %s (%s)\n", total_mem,
			vfnvme_strerror(rc), vfnvme_last_error());
		return 1;
	}
	td->orig_buffer = p;
	vt->mem_start = (uintptr_t)p;
	vt->mem_end = (uintptr_t)p + total_mem;
	return 0;
}

static void vf_qp_iomem_free(struct thread_data *td, struct vf_thread *vt)
{
	if (vt->mem_heap)
		free(td->orig_buffer);
	else if (vt->mem_ctrl && td->orig_buffer)
		vfnvme_dma_free(vt->mem_ctrl->ctrl, td->orig_buffer);
	vt->mem_heap = false;
	vt->mem_start = vt->mem_end = 0;
	td->orig_buffer = NULL;
}

static int vf_iomem_alloc(struct thread_data *td, size_t total_mem)
{
	struct vf_thread *vt = td->io_ops_data;
	if (!vt) {
		log_err("vfnvme: iomem_alloc before init\n");
		return 1;
	}
	return vt->be->iomem_alloc(td, vt, total_mem);
}

static void vf_iomem_free(struct thread_data *td)
{
	struct vf_thread *vt = td->io_ops_data;
	if (vt)
		vt->be->iomem_free(td, vt);
	else
		td->orig_buffer = NULL;
}

static int vf_io_u_init(struct thread_data *td, struct io_u *io_u)
{
	struct vf_iou *e = calloc(1, sizeof(*e));
	if (!e)
		return 1;
	e->vt = td->io_ops_data;
	e->io_u = io_u;
	e->idx = e->vt ? e->vt->niou++ : 0;
	io_u->engine_data = e;
	return 0;
}

static void vf_io_u_free(struct thread_data *td, struct io_u *io_u)
{
	if (io_u->engine_data)
		vf_md_free(io_u->engine_data);
	free(io_u->engine_data);
	io_u->engine_data = NULL;
}

/* The name of an NVMe status the engine's users meet, or NULL. */
static const char *vf_status_name(uint8_t sct, uint8_t sc)
{
	if (sct == 2 && sc == 0x80)
		return "Write Fault";
	if (sct == 2 && sc == 0x81)
		return "Unrecovered Read Error";
	if (sct == 2 && sc == 0x82)
		return "End-to-end Guard Check Error";
	if (sct == 2 && sc == 0x83)
		return "End-to-end Application Tag Check Error";
	if (sct == 2 && sc == 0x84)
		return "End-to-end Reference Tag Check Error";
	if (sct == 2 && sc == 0x86)
		return "Access Denied";
	if (sct == VFNVME_SCT_PATH && sc == 0x70)
		return "controller lost";
	if (sct == VFNVME_SCT_PATH && sc == 0x71)
		return "aborted by controller reset";
	return NULL;
}

/*
 * Reports a failed I/O with its NVMe status (fio itself only sees EIO), so that a media error
 * (sct 0x2: sc 0x81 Unrecovered Read Error, sc 0x80 Write Fault) is told apart from a lost
 * controller or a reset. Error path only, and at most VF_ERROR_REPORTS lines per thread.
 */
static void vf_report_error(struct vf_iou *e, const struct vfnvme_completion *c)
{
	static const char *why[] = { "", ": no usable path", ": queueing switched off",
				     ": no path came back in time", ": head removed", ": refused" };
	const struct vfnvme_cpl *cpl = &c->cpl;
	struct io_u *io_u = e->io_u;
	struct vf_thread *vt = e->vt;

	if (vt) {
		if (vt->errors_reported >= VF_ERROR_REPORTS)
			return;
		if (++vt->errors_reported == VF_ERROR_REPORTS)
			log_err("vfnvme: %u failed I/Os reported; this thread reports no more\n",
				VF_ERROR_REPORTS);
	}
	const char *op = io_u->ddir == DDIR_READ ? "read" : io_u->ddir == DDIR_WRITE ? "write" :
		"command";
	const char *file = io_u->file ? io_u->file->file_name : "?";
	/* On a channel: the path it ended on and why it failed without a device status. */
	char path[96] = "";
	unsigned int k = (unsigned int)c->reason;
	if (c->path >= 0 || k)
		snprintf(path, sizeof(path), " on path %d%s", c->path,
			 k < sizeof(why) / sizeof(why[0]) ? why[k] : ": ?");
	if (!cpl->status) {
		log_err("vfnvme: %s: %s of %llu bytes at offset %llu failed%s: %s\n", file, op,
			(unsigned long long)io_u->xfer_buflen, (unsigned long long)io_u->offset, path,
			vfnvme_strerror(cpl->rc));
		return;
	}
	const char *name = vf_status_name(cpl->sct, cpl->sc);
	log_err("vfnvme: %s: %s of %llu bytes at offset %llu failed%s: NVMe status 0x%04x "
		"(sct 0x%x sc 0x%02x dnr %d more %d%s%s)\n",
		file, op, (unsigned long long)io_u->xfer_buflen, (unsigned long long)io_u->offset,
		path, cpl->status, cpl->sct, cpl->sc, (cpl->status >> 14) & 1,
		(cpl->status >> 13) & 1, name ? ": " : "", name ? name : "");
}

/* Completes the io_u of e (submitted without a callback; reaped in a batch by getevents), on a
 * queue pair or a channel. */
static void vf_done(struct vf_iou *e, const struct vfnvme_completion *c)
{
	const struct vfnvme_cpl *cpl = &c->cpl;
	struct io_u *io_u = e->io_u;

	(*e->inflight)--;
	/* Device errors, the two statuses vfnvme gives commands it ends itself (sct 3: sc 0x71
	 * VFNVME_SC_ABORTED_BY_RESET after a reset, sc 0x70 VFNVME_SC_CONTROLLER_LOST once the
	 * controller is gone or failed) and a channel's failures are all EIO for fio. */
	if (cpl->status || cpl->rc) {
		vf_report_error(e, c);
		/* "Controller lost" on a queue pair: gone or failed for good. Mark it so that it is
		 * released when its last job ends, even if the job ends before the admin poller
		 * notices. */
		if (e->tq && cpl->sct == VFNVME_SCT_PATH && cpl->sc == VFNVME_SC_CONTROLLER_LOST)
			atomic_store(&e->tq->c->failed, 1);
		io_u->error = EIO;
		io_u->resid = io_u->xfer_buflen;
	} else {
		io_u->error = 0;
		io_u->resid = 0;
		/* Metadata: the host's PI check of a read, the data out of extended blocks. */
		if (e->md_vf && (io_u->error = vf_md_complete(e, io_u, e->bounce ? e->bounce :
							 io_u->xfer_buf))) {
			io_u->resid = io_u->xfer_buflen;
			return;
		}
		if (e->bounce && io_u->ddir == DDIR_READ)
			memcpy(io_u->xfer_buf, e->bounce, io_u->xfer_buflen);
	}
}

int vf_poll_ready(struct vf_thread *vt, void *q, unsigned int *inflight, unsigned int *uncommitted)
{
	unsigned int room = vt->depth - vt->ready_count;
	if (!*inflight || !room)
		return 0;
	*uncommitted = 0; /* polling commits */
	int n = vt->be->poll(q, vt->cpls, room);
	if (n < 0) {
		vf_log_rc(vt->be->poll_name, n);
		return -EIO;
	}
	for (int j = 0; j < n; j++) {
		struct vf_iou *e = vt->cpls[j].arg;
		vf_done(e, &vt->cpls[j]);
		vf_ready_push(vt, e->io_u);
	}
	return 0;
}

int vf_drain(struct vf_thread *vt, void *q, unsigned int *inflight)
{
	double start = vf_now();
	while (*inflight) {
		int n = vt->be->poll(q, vt->cpls, vt->depth);
		if (n < 0 || (n == 0 && vf_now() - start > VF_DRAIN_TIMEOUT_S))
			return 1;
		for (int j = 0; j < n; j++)
			vf_done(vt->cpls[j].arg, &vt->cpls[j]);
	}
	return 0;
}

/*
 * Appends a completed io_u to the ready ring. It holds depth entries and every io_u of the
 * thread (depth of them) is in it at most once, and vf_reap asks for no more than the room left:
 * a full ring is an engine bug, which would lose the io_u. Stop with a message instead.
 */
static void vf_ready_push(struct vf_thread *vt, struct io_u *io_u)
{
	if (vt->ready_count >= vt->depth) {
		log_err("vfnvme: BUG: the ready ring is full (%u of %u io_us) with io_u %p still to "
			"hand back to fio; stopping rather than losing it\n",
			vt->ready_count, vt->depth, (void *)io_u);
		abort();
	}
	unsigned int slot = vt->ready_head + vt->ready_count;
	vt->ready[slot >= vt->depth ? slot - vt->depth : slot] = io_u;
	vt->ready_count++;
}

/* Takes the oldest io_u out of the ready ring (which must not be empty). */
static struct io_u *vf_ready_pop(struct vf_thread *vt)
{
	struct io_u *io_u = vt->ready[vt->ready_head];
	if (++vt->ready_head == vt->depth)
		vt->ready_head = 0;
	vt->ready_count--;
	return io_u;
}

/* The data pointer for io_u on tq's controller: the io_u's own buffer or a bounce buffer. */
static void *vf_data(struct vf_thread *vt, struct vf_tq *tq, struct io_u *io_u)
{
	struct vf_iou *e = io_u->engine_data;
	uint64_t iova;
	uintptr_t p = (uintptr_t)io_u->xfer_buf;
	e->bounce = NULL;
	/* fio's buffers lie in td->orig_buffer: DMA memory of mem_ctrl, no lookup needed (the
	 * submit call still checks the pointer). Anything else: ask the driver. */
	if (tq->c == vt->mem_ctrl && p >= vt->mem_start && p < vt->mem_end)
		return io_u->xfer_buf;
	if (vfnvme_dma_translate(tq->c->ctrl, io_u->xfer_buf, &iova) == 0)
		return io_u->xfer_buf;
	if (e->idx >= vt->depth)
		return NULL;
	if (!tq->bounce) {
		tq->bounce = calloc(vt->depth, sizeof(void *));
		if (!tq->bounce)
			return NULL;
	}
	if (!tq->bounce[e->idx] &&
	    vfnvme_dma_alloc(tq->c->ctrl, vt->max_bs, &tq->bounce[e->idx], NULL))
		return NULL;
	e->bounce = tq->bounce[e->idx];
	if (io_u->ddir == DDIR_WRITE)
		memcpy(e->bounce, io_u->xfer_buf, io_u->xfer_buflen);
	return e->bounce;
}

/* Gives the io_us queued since the last commit their issue time and tells fio they went out. */
static void vf_mark_issued(struct thread_data *td, struct vf_thread *vt)
{
	if (fio_fill_issue_time(td)) {
		if (!vt->tsc_issue_time || !vf_issue_times_from_tsc(vt)) {
			struct timespec now;
			fio_gettime(&now, NULL);
			for (unsigned int i = 0; i < vt->nqueued; i++)
				memcpy(&vt->queued[i]->issue_time, &now, sizeof(now));
		}
		for (unsigned int i = 0; i < vt->nqueued; i++)
			io_u_queued(td, vt->queued[i]);
	}
	io_u_mark_submit(td, vt->nqueued);
	vt->nqueued = 0;
}

/* Queues io_u on one of the thread's queue pairs (vf_qpair_backend.submit). */
static int vf_qp_submit(struct vf_thread *vt, struct io_u *io_u, struct vf_file *vf, uint64_t lba,
			uint32_t blocks)
{
	struct vf_iou *e = io_u->engine_data;
	struct vf_tq *tq;
	int rc;

	if (vf == vt->last_vf) {
		tq = vt->last_tq;
	} else {
		tq = vf_tq_of(vt, vf->c);
		vt->last_vf = vf;
		vt->last_tq = tq;
	}
	if (!tq)
		return EINVAL;
	e->tq = tq;
	e->bounce = NULL;
	switch (io_u->ddir) {
	case DDIR_READ:
	case DDIR_WRITE: {
		void *data = vf_data(vt, tq, io_u);
		if (!data) {
			log_err("vfnvme: no DMA buffer for %s\n", io_u->file->file_name);
			return ENOMEM;
		}
		if (vf->has_md) {
			rc = vf_md_submit(vt, tq, io_u, vf, lba, blocks, data);
			if (rc > 0)
				return rc;
			break;
		}
		rc = io_u->ddir == DDIR_READ
			     ? vfnvme_qpair_read(tq->qp, vf->nsid, data, lba, blocks, NULL, e)
			     : vfnvme_qpair_write(tq->qp, vf->nsid, data, lba, blocks, NULL, e);
		break;
	}
	case DDIR_TRIM: {
		struct vfnvme_range r = { .lba = lba, .blocks = blocks };
		rc = vfnvme_qpair_deallocate(tq->qp, vf->nsid, &r, 1, NULL, e);
		break;
	}
	case DDIR_SYNC:
	case DDIR_DATASYNC:
	case DDIR_SYNC_FILE_RANGE:
		rc = vfnvme_qpair_flush(tq->qp, vf->nsid, NULL, e);
		break;
	default:
		return EINVAL;
	}
	if (rc)
		return rc;
	e->inflight = &tq->inflight;
	tq->inflight++;
	tq->uncommitted++;
	return 0;
}

static enum fio_q_status vf_queue(struct thread_data *td, struct io_u *io_u)
{
	struct vf_thread *vt = td->io_ops_data;
	struct vf_file *vf = FILE_ENG_DATA(io_u->file);
	struct vf_iou *e = io_u->engine_data;

	vf_note_queued(vt, e);
	fio_ro_check(td, io_u);
	if (!vf) {
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	e->vt = vt;
	e->tq = NULL;
	e->chan = NULL;
	e->bounce = NULL;
	e->md_vf = NULL;
	uint64_t mask = vf->lba_size - 1;
	if ((io_u->offset & mask) || (io_u->xfer_buflen & mask)) {
		log_err("vfnvme: %s: I/O at %llu length %llu is not a multiple of the %u-byte block\n",
			io_u->file->file_name, io_u->offset, io_u->xfer_buflen, vf->lba_size);
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	uint64_t lba = io_u->offset >> vf->lba_shift;
	uint32_t blocks = (uint32_t)(io_u->xfer_buflen >> vf->lba_shift);
	int rc = vt->be->submit(vt, io_u, vf, lba, blocks);
	if (rc > 0) {
		io_u->error = rc;
		return FIO_Q_COMPLETED;
	}
	/* The one mapping of a refused submission: FIO_Q_BUSY on a full queue (fio reaps and
	 * tries again), else the io_u completes with an error after logging why. */
	if (rc == VFNVME_ERR_QUEUE_FULL)
		return FIO_Q_BUSY;
	if (rc) {
		log_err("vfnvme: %s: submitting failed: %s (%s)\n", io_u->file->file_name,
			vfnvme_strerror(rc), vfnvme_last_error());
		io_u->error = rc == VFNVME_ERR_OUT_OF_RANGE ? EINVAL : EIO;
		return FIO_Q_COMPLETED;
	}
	/* fio commits before the thread has more than depth io_us queued; if it ever did not (an
	 * io_u reaped by a poll and queued again before the commit), give the queued ones their
	 * issue time now rather than lose one. */
	if (vt->nqueued >= vt->depth)
		vf_mark_issued(td, vt);
	vt->queued[vt->nqueued++] = io_u;
	if (vt->complete_inline && vt->be->inline_qd1 && vf_complete_inline(td, vt))
		return FIO_Q_COMPLETED;
	return FIO_Q_QUEUED;
}

static void vf_qp_commit(struct vf_thread *vt)
{
	for (int i = 0; i < vt->ntq; i++) {
		struct vf_tq *tq = &vt->tq[i];
		if (tq->uncommitted) {
			vfnvme_qpair_commit(tq->qp);
			tq->uncommitted = 0;
		}
	}
}

static int vf_commit(struct thread_data *td)
{
	struct vf_thread *vt = td->io_ops_data;
	if (!vt->nqueued)
		return 0;
	/*
	 * Hand the batch to the driver. Its queue pairs defer the doorbell (defer_sq_doorbell): it
	 * is written now when the device would otherwise sit idle or half of what is in flight
	 * waits for it, and otherwise by the next poll in getevents(): one doorbell per batch, even
	 * when fio commits after every io_u (its default iodepth_batch=1).
	 */
	vt->be->commit(vt);
	vf_mark_issued(td, vt);
	return 0;
}

static int vf_qp_poll(void *q, struct vfnvme_completion *out, uint32_t max)
{
	return vfnvme_qpair_poll_completions(q, max, out);
}

/* Reaps what the thread's queue pairs have completed into the ready ring (one poll call per
 * queue pair, which also rings the doorbell for submissions not yet rung). */
static int vf_qp_reap(struct vf_thread *vt)
{
	for (int i = 0; i < vt->ntq; i++) {
		struct vf_tq *tq = &vt->tq[i];
		if (vf_poll_ready(vt, tq->qp, &tq->inflight, &tq->uncommitted))
			return -EIO;
	}
	return 0;
}

static unsigned int vf_qp_inflight(struct vf_thread *vt)
{
	unsigned int n = 0;
	for (int i = 0; i < vt->ntq; i++)
		n += vt->tq[i].inflight;
	return n;
}

/* Whether a controller the thread waits on reported an error (the admin poller saw it). */
static struct vf_ctrl *vf_failed_ctrl(struct vf_thread *vt)
{
	for (int i = 0; i < vt->ntq; i++)
		if (vt->tq[i].inflight && atomic_load_explicit(&vt->tq[i].c->failed,
							       memory_order_relaxed))
			return vt->tq[i].c;
	return NULL;
}

/*
 * At iodepth=1 queue() hands fio the I/O already done, as fio's synchronous engines do: it rings
 * the doorbell and polls this one queue pair until the completion is in. fio then skips its
 * commit, getevents and event rounds, about 4% of the instructions per I/O at this depth
 * (callgrind, docs/fio-engine.md). Only when nothing else is in flight or waiting to be handed
 * back (queue() never gets here for multipath heads). False (the I/O stays queued, and
 * getevents reports it as before) when the poll fails or the controller reports an error.
 */
static bool vf_complete_inline(struct thread_data *td, struct vf_thread *vt)
{
	if (vt->be->inflight(vt) != 1 || vt->ready_count)
		return false;
	vf_commit(td);
	while (!vt->ready_count) {
		if (vt->be->reap(vt) || vf_failed_ctrl(vt))
			return false;
	}
	/* The one completion in the ready ring is this io_u's: nothing else was in flight. */
	vf_ready_pop(vt);
	io_u_mark_complete(td, 1);
	return true;
}

/* Adds `d` to `ts`. */
static void vf_ts_add(struct timespec *ts, const struct timespec *d)
{
	ts->tv_sec += d->tv_sec;
	ts->tv_nsec += d->tv_nsec;
	ts->tv_sec += ts->tv_nsec / 1000000000L;
	ts->tv_nsec %= 1000000000L;
}

/* Whether `now` is at or past `deadline`. */
static bool vf_ts_reached(const struct timespec *now, const struct timespec *deadline)
{
	return now->tv_sec > deadline->tv_sec ||
	       (now->tv_sec == deadline->tv_sec && now->tv_nsec >= deadline->tv_nsec);
}

/*
 * fio asks for few events at a time (by default min = max = 1, once per I/O). Polling the device
 * for each would pay a poll per I/O. Instead one poll reaps everything the device has completed
 * into the ready ring, and the following calls are served from it without touching the device.
 *
 * When fewer than min are ready, it polls until min are, or until the timeout t (if given) runs
 * out, returning what completed by then; without a timeout it fails with -EIO if a controller
 * it waits on reports an error, instead of polling forever.
 */
static int vf_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			const struct timespec *t)
{
	struct vf_thread *vt = td->io_ops_data;
	if (max > vt->depth)
		max = vt->depth;
	if (min > max)
		min = max;
	if (vt->ready_count < min || !vt->ready_count) {
		/*
		 * A zero timeout (fio's "reap what is there") is one reap, no clock. Other
		 * deadlines are polled with the coarse clock, which the vDSO serves from memory
		 * whatever the kernel's clocksource: CLOCK_MONOTONIC on hpet (a guest on QEMU's
		 * default CPU) is a system call plus a trapped register read, so it is read only at
		 * the start and the end of a timed wait. A deadline may run over by up to two ticks
		 * (2-20 ms), never end early.
		 */
		int zero = t && t->tv_sec == 0 && t->tv_nsec == 0;
		struct timespec deadline = { 0, 0 }, exact_deadline = { 0, 0 };
		if (t && !zero) {
			/* One tick more: the coarse clock lags the real one by about a tick. It can
			 * lag more (a tick late on a busy or virtual CPU), so once the coarse clock
			 * says the time is up, the real clock confirms it: the wait never ends before
			 * the timeout, and the real clock is read only at its end. */
			struct timespec tick = { 0, 0 };
			clock_getres(CLOCK_MONOTONIC_COARSE, &tick);
			clock_gettime(CLOCK_MONOTONIC_COARSE, &deadline);
			vf_ts_add(&deadline, t);
			vf_ts_add(&deadline, &tick);
			clock_gettime(CLOCK_MONOTONIC, &exact_deadline);
			vf_ts_add(&exact_deadline, t);
		}
		for (;;) {
			if (vt->be->reap(vt))
				return -EIO;
			if (vt->ready_count >= min)
				break;
			if (!vt->be->inflight(vt))
				break; /* nothing more can complete */
			if (zero)
				break;
			if (t) {
				struct timespec now;
				clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
				if (vf_ts_reached(&now, &deadline)) {
					clock_gettime(CLOCK_MONOTONIC, &now);
					if (vf_ts_reached(&now, &exact_deadline))
						break;
				}
			} else {
				struct vf_ctrl *c = vf_failed_ctrl(vt);
				if (c) {
					log_err("vfnvme: %s: waiting for %u completion(s), but the "
						"controller reported an error: failing with EIO\n",
						c->key, min - vt->ready_count);
					return -EIO;
				}
			}
		}
	}
	unsigned int n = vt->ready_count < max ? vt->ready_count : max;
	for (unsigned int i = 0; i < n; i++)
		vt->events[i] = vf_ready_pop(vt);
	vt->nevents = n;
	return (int)n;
}

static struct io_u *vf_event(struct thread_data *td, int event)
{
	struct vf_thread *vt = td->io_ops_data;
	if (event < 0 || (unsigned int)event >= vt->nevents)
		return NULL;
	return vt->events[event];
}

static int vf_open_file(struct thread_data *td, struct fio_file *f)
{
	return FILE_ENG_DATA(f) ? 0 : 1;
}

static int vf_close_file(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static int vf_get_file_size(struct thread_data *td, struct fio_file *f)
{
	struct vf_file *vf = FILE_ENG_DATA(f);
	if (!vf)
		return 1;
	f->real_file_size = vf->blocks * vf->lba_size;
	fio_file_set_size_known(f);
	return 0;
}

const struct vf_backend vf_qpair_backend =
	VF_BACKEND(vf_qp, "vfnvme_qpair_poll_completions", true);

/*
 * The engine's options: every key of the filename syntax, plus the controller's admin timeout and
 * the doorbell batching switch. They are the job's defaults; a filename key overrides them for
 * its file. Unset (0 or empty) means the filename's or the driver's default.
 */
#define VF_OPT_DEF(nm, ln, ty, field, dflt, hl)                                                \
	{                                                                                      \
		.name = nm, .lname = ln, .type = ty, .off1 = offsetof(struct vf_options, field), \
		.def = dflt, .help = hl, .category = FIO_OPT_C_ENGINE,                          \
		.group = FIO_OPT_G_INVALID,                                                     \
	}
/* An option without a default of fio's (unset stays 0 or NULL). */
#define VF_OPT(nm, ln, ty, field, hl) VF_OPT_DEF(nm, ln, ty, field, NULL, hl)

static struct fio_option options[] = {
	VF_OPT("trtype", "vfnvme transport type", FIO_OPT_STR_STORE, trtype,
	       "Transport of every file without trtype in its filename: PCIe (a device bound to "
	       "vfio-pci) or model (the in-memory controller model)"),
	VF_OPT("traddr", "vfnvme PCI address", FIO_OPT_STR_STORE, traddr,
	       "PCI address of the controller for trtype=PCIe, e.g. 0000.00.10.0 (write ':' as '.' "
	       "or '\\:')"),
	VF_OPT("ns", "vfnvme namespace id", FIO_OPT_INT, ns,
	       "Namespace ID (1 or more; unset: 1)"),
	VF_OPT("id", "vfnvme model id", FIO_OPT_STR_STORE, id,
	       "Name of the model controller: files with the same id share one model (default 0)"),
	VF_OPT("namespaces", "vfnvme model namespaces", FIO_OPT_INT, namespaces,
	       "Model: number of namespaces (unset: 1)"),
	VF_OPT("lba_size", "vfnvme model block size", FIO_OPT_INT, lba_size,
	       "Model: logical block size in bytes, 512 or 4096 (unset: 4096)"),
	VF_OPT("blocks", "vfnvme model blocks", FIO_OPT_ULL, blocks,
	       "Model: blocks per namespace (unset: 65536)"),
	VF_OPT("latency_ns", "vfnvme model latency", FIO_OPT_INT, latency_ns,
	       "Model: virtual time a command takes in nanoseconds (unset: the model's default)"),
	VF_OPT("seed", "vfnvme model seed", FIO_OPT_ULL, seed,
	       "Model: seed of its pseudo-random choices (unset: a fixed default)"),
	VF_OPT("backing", "vfnvme model backing", FIO_OPT_STR_STORE, backing,
	       "Model: where data lives: ram (kept in sparse memory, the default) or null "
	       "(discarded; measures the driver alone)"),
	VF_OPT("hang_reads", "vfnvme model hung reads", FIO_OPT_BOOL, hang_reads,
	       "Model fault injection: reads are fetched but never complete, as on a hung device "
	       "(for tests of timeouts)"),
	VF_OPT("admin_timeout_ms", "vfnvme admin timeout", FIO_OPT_INT, admin_timeout_ms,
	       "PCIe: how long an admin command (bring-up, queue creation, namespace scans) may take "
	       "before it fails, in milliseconds (unset: the driver's 30000)"),
	VF_OPT("no_iommu", "vfnvme no-IOMMU mode", FIO_OPT_BOOL, no_iommu,
	       "PCIe, machines without an IOMMU: open the controller in the explicit no-IOMMU mode "
	       "(bound to uio_pci_generic by `vfnvme setup --no-iommu`; hugepages, physical DMA "
	       "addresses, root). Nothing then checks the device's DMA: any device bug or misuse "
	       "can write anywhere in memory (unset: 0, an IOMMU is required)"),
	VF_OPT("io_retries", "vfnvme I/O retries", FIO_OPT_INT, io_retries,
	       "How often an I/O is sent again, with the same buffer, when it fails with a "
	       "retryable status (DNR=0) or was in flight at a controller reset (unset: 0, the I/O "
	       "fails with EIO; at most 255; I/Os that timed out are not retried)"),
	VF_OPT("reset_after_ms", "vfnvme test reset", FIO_OPT_INT, reset_after_ms,
	       "Test hook: reset the controller once through the API (vfnvme_ctrl_reset), this many "
	       "milliseconds after it was opened, while the job runs (unset: never)"),
	VF_OPT("io_timeout_ms", "vfnvme I/O timeout", FIO_OPT_INT, io_timeout_ms,
	       "How long an I/O may take, in milliseconds, before the driver aborts it and then "
	       "resets the controller; the I/O then fails with EIO (unset: the driver's 30000; "
	       "virtual time on the model)"),
	VF_OPT("paths", "vfnvme model paths", FIO_OPT_INT, paths,
	       "Model: open a multipath head on a model subsystem of this many controllers (ANA "
	       "group N holds namespace N) instead of one controller (unset: 0, a controller)"),
	VF_OPT("mp_policy", "vfnvme multipath policy", FIO_OPT_STR_STORE, mp_policy,
	       "Multipath heads: path policy, numa, round-robin or queue-depth (unset: numa)"),
	VF_OPT_DEF("mp_queue_if_no_path", "vfnvme queue if no path", FIO_OPT_BOOL,
		   mp_queue_if_no_path, "1",
		   "Multipath heads: while no path is usable, keep I/O queued (1, the default) "
		   "or fail it with EIO at once (0)"),
	VF_OPT("mp_delayed_removal_ms", "vfnvme delayed removal", FIO_OPT_INT,
	       mp_delayed_removal_ms,
	       "Multipath heads: how long I/O waits for a path to come back before it fails with "
	       "EIO, in milliseconds (unset: 0, for ever)"),
	VF_OPT("mp_fail_after_ms", "vfnvme test path failure", FIO_OPT_INT, mp_fail_after_ms,
	       "Test hook, model subsystems (paths=N): fail the path through controller 0 this "
	       "many milliseconds after the subsystem was opened, as mp_fail says (unset: never)"),
	VF_OPT("mp_fail", "vfnvme test path failure kind", FIO_OPT_STR_STORE, mp_fail,
	       "Test hook: how mp_fail_after_ms fails the path: ana (the namespace's ANA group "
	       "turns inaccessible on controller 0, the default) or remove (controller 0 is hot "
	       "removed)"),
	VF_OPT("mp_detach_after_ms", "vfnvme test detach", FIO_OPT_INT, mp_detach_after_ms,
	       "Test hook, multipath heads: detach the file's namespace from controller 0 by "
	       "Namespace Attachment this many milliseconds after the subsystem was opened "
	       "(unset: never)"),
	VF_OPT("mp_attach_after_ms", "vfnvme test attach", FIO_OPT_INT, mp_attach_after_ms,
	       "Test hook, multipath heads: attach the namespace to controller 0 again this many "
	       "milliseconds after the subsystem was opened (after mp_detach_after_ms; unset: "
	       "never)"),
	VF_OPT_DEF("defer_sq_doorbell", "vfnvme deferred doorbell", FIO_OPT_BOOL,
		   defer_sq_doorbell, "1",
		   "Let the driver defer the submission doorbell of a commit while the device is "
		   "busy, until half of what is in flight waits for it or the next poll (one "
		   "doorbell per batch); 0 rings at every commit"),
	VF_OPT_DEF("tsc_issue_time", "vfnvme TSC issue time", FIO_OPT_BOOL,
		   tsc_issue_time, "1",
		   "Give each I/O its issue time (slat's end) from its start time plus the "
		   "TSC-measured time the engine took to hand it to the driver, sparing fio one "
		   "clock read per commit; 0 reads fio's clock at every commit"),
	VF_OPT_DEF("inline_qd1", "vfnvme inline completion", FIO_OPT_BOOL, inline_qd1, "1",
		   "At iodepth=1, wait for each I/O's completion in queue() and return it done "
		   "(as fio's synchronous engines do), sparing fio its commit and getevents "
		   "rounds; 0 keeps the asynchronous rounds"),
	VF_OPT("enable_sgl", "vfnvme SGLs", FIO_OPT_BOOL, enable_sgl,
	       "Send every read and write with SGLs (SGL Data Block descriptors) instead of PRPs "
	       "where the controller supports SGLs (Identify Controller SGLS; ignored otherwise, "
	       "with a note); unset: 0, PRPs (SPDK's enable_sgl)"),
	VF_OPT("md_per_io_size", "vfnvme metadata per I/O", FIO_OPT_INT, md_per_io_size,
	       "Namespaces with separate metadata: bytes of each I/O's metadata buffer (at least "
	       "the largest I/O's blocks times the metadata size; unset: exactly that)"),
	VF_OPT("pi_act", "vfnvme PRACT", FIO_OPT_INT, pi_act,
	       "Namespaces with protection information: 1 sets PRACT (the controller inserts the "
	       "PI on writes, checks and strips it on reads); 0 (the default): the engine "
	       "generates the PI of each write"),
	VF_OPT("pi_chk", "vfnvme PRCHK", FIO_OPT_STR_STORE, pi_chk,
	       "Protection information checks, a comma list of GUARD, REFTAG and APPTAG (PRCHK; "
	       "with pi_act=0 the engine also checks each read's PI itself)"),
	VF_OPT_DEF("apptag", "vfnvme application tag", FIO_OPT_INT, apptag, "0x1234",
		   "Application tag of the protection information (hex, default 0x1234)"),
	VF_OPT_DEF("apptag_mask", "vfnvme application tag mask", FIO_OPT_INT, apptag_mask,
		   "0xffff", "Bits of the application tag checked (hex, default 0xffff)"),
	{
		.name = NULL,
	},
};

struct ioengine_ops ioengine = {
	.name = "vfnvme",
	.version = FIO_IOOPS_VERSION,
	.flags = FIO_DISKLESSIO | FIO_NOEXTEND | FIO_NODISKUTIL | FIO_RAWIO | FIO_MEMALIGN |
		 FIO_ASYNCIO_SETS_ISSUE_TIME,
	.setup = vf_setup,
	.init = vf_init,
	.queue = vf_queue,
	.commit = vf_commit,
	.getevents = vf_getevents,
	.event = vf_event,
	.cleanup = vf_cleanup,
	.open_file = vf_open_file,
	.close_file = vf_close_file,
	.get_file_size = vf_get_file_size,
	.iomem_alloc = vf_iomem_alloc,
	.iomem_free = vf_iomem_free,
	.io_u_init = vf_io_u_init,
	.io_u_free = vf_io_u_free,
	.options = options,
	.option_struct_size = sizeof(struct vf_options),
};
