/*
 * vfnvme_fio_mp.c: multipath heads in the vfnvme fio engine: the channel backend
 * (vf_mp_backend) and the subsystems behind it. A compilation unit of its own; what it shares
 * with vfnvme_fio.c is in vfnvme_fio.h.
 *
 * A file that names several controllers is a multipath head: one namespace of an NVM
 * subsystem seen through every controller that has it.
 *   trtype=PCIe traddr=0000.00.10.0+0000.00.11.0 ns=1   the controllers (all of one subsystem)
 *   trtype=PCIe subnqn=nqn.2019-08.org.qemu\:vfnvme-mp ns=1
 *                                                      every controller bound to vfio-pci
 *                                                      whose SUBNQN matches (escape ':')
 *   trtype=model paths=2 ns=1 [id=NAME] [namespaces=N] [lba_size=B] [blocks=N] [latency_ns=T]
 *                                                      a model subsystem of 2 controllers
 * SPDK writes one controller per filename; its multipath bdevs are configured by RPC, so this
 * syntax is vfnvme's own: SPDK's keys, with '+' joining the controllers' addresses.
 *
 * Each fio thread opens one vfnvme_channel per head (file); the channel picks a path per I/O
 * by the head's policy (mp_policy), fails I/O over to another path with the same buffer on a
 * path error, and queues it while no path is usable (mp_queue_if_no_path, bounded in time by
 * mp_delayed_removal_ms). fio sees an error only when no path is left and queueing is off or
 * runs out. One poller thread per subsystem calls vfnvme_subsys_poll every millisecond and
 * reports path and ANA events on stderr. At the end of each job the I/Os per path are printed
 * on stderr:
 *   vfnvme: <file>: I/Os per path: 0000:00:10.0=1234 0000:00:11.0=5678 (failovers 3, ...)
 * A job's files are all heads of one subsystem, or all controller namespaces.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vfnvme_fio.h"

#define VF_MAX_SUBS 8
/* How often a subsystem's poller calls vfnvme_subsys_poll. */
#define VF_MP_POLL_US 1000

/* A subsystem shared by every file and thread of the process. */
struct vf_sub {
	char key[VF_KEY_LEN + 256];
	struct vfnvme_subsys *s;
	int model;
	unsigned int users; /* fio threads with channels on it (under vf_lock) */
	int poller_running;
	pthread_t poller;
	atomic_int stop;
	/* Test hook (mp_fail_after_ms, model only): fail the path through controller 0. */
	unsigned int fail_after_ms;
	int fail_remove;
	uint32_t fail_nsid;
	int fail_done;
	unsigned long long opened_ns;
	/* Test hook (mp_detach_after_ms, mp_attach_after_ms): Namespace Attachment of fail_nsid
	 * on controller 0, detached then attached again. */
	unsigned int detach_after_ms, attach_after_ms;
	int detach_done, attach_done;
};

static struct vf_sub vf_subs[VF_MAX_SUBS];

/* A thread's channel on one head (file). */
struct vf_chan {
	struct vf_file *vf;
	const char *name;
	struct vfnvme_channel *ch;
	unsigned int inflight; /* submitted, not yet reaped */
	unsigned int uncommitted;
};

/* A thread whose files are heads. */
struct vf_mp_thread {
	struct vf_sub *sub;
	struct vf_chan *chans;
	unsigned int nchans;
	uintptr_t mem_start, mem_end;
};

/* traddr=A+B[+...]: the controllers of a head. */
int vf_mp_parse_traddr(struct vf_target *t, const char *what, const char *v)
{
	char buf[VF_MAX_CTRLS * 20];
	snprintf(buf, sizeof(buf), "%s", v);
	t->mp = 1;
	t->npaths = 0;
	char *save = NULL;
	for (char *a = strtok_r(buf, "+", &save); a; a = strtok_r(NULL, "+", &save)) {
		if (t->npaths >= VF_MAX_CTRLS) {
			log_err("vfnvme: %s: more than %d controllers in traddr\n", what, VF_MAX_CTRLS);
			return -1;
		}
		if (vf_canon_pci(a, t->path_addr[t->npaths], sizeof(t->path_addr[0]))) {
			log_err("vfnvme: %s: bad address '%s' in traddr '%s' (use "
				"0000.00.10.0+0000.00.11.0)\n", what, a, v);
			return -1;
		}
		t->npaths++;
	}
	if (t->npaths < 1) {
		log_err("vfnvme: %s: traddr '%s' names no controller\n", what, v);
		return -1;
	}
	return 0;
}

static const char *vf_mp_state_name(enum vfnvme_path_state s)
{
	static const char *names[] = { "none", "optimized", "non-optimized", "inaccessible",
				       "persistent-loss", "change", "gone" };
	unsigned int k = (unsigned int)s;
	return k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

/* Reports the subsystem's events on stderr. */
static void vf_mp_report_events(struct vf_sub *sub)
{
	struct vfnvme_mp_event ev;
	while (vfnvme_subsys_next_event(sub->s, &ev) == 1) {
		switch (ev.kind) {
		case VFNVME_MP_EVENT_PATH_ADDED:
			fprintf(stderr, "vfnvme: %s: ns %u: path through controller %d added (%s)\n",
				sub->key, ev.nsid, ev.controller, vf_mp_state_name(ev.new_state));
			break;
		case VFNVME_MP_EVENT_PATH_REMOVED:
			fprintf(stderr, "vfnvme: %s: ns %u: path through controller %d removed\n",
				sub->key, ev.nsid, ev.controller);
			break;
		case VFNVME_MP_EVENT_PATH_STATE:
			fprintf(stderr, "vfnvme: %s: ns %u: path through controller %d: %s -> %s\n",
				sub->key, ev.nsid, ev.controller, vf_mp_state_name(ev.old_state),
				vf_mp_state_name(ev.new_state));
			break;
		case VFNVME_MP_EVENT_ANA_CHANGE:
			fprintf(stderr, "vfnvme: %s: %u ANA change notice(s)\n", sub->key, ev.count);
			break;
		case VFNVME_MP_EVENT_HEAD_ADDED:
			fprintf(stderr, "vfnvme: %s: head of ns %u added\n", sub->key, ev.nsid);
			break;
		case VFNVME_MP_EVENT_HEAD_REMOVED:
			fprintf(stderr, "vfnvme: %s: head of ns %u removed\n", sub->key, ev.nsid);
			break;
		case VFNVME_MP_EVENT_CONTROLLER_LOST:
			fprintf(stderr, "vfnvme: %s: controller %d lost\n", sub->key, ev.controller);
			break;
		case VFNVME_MP_EVENT_CONTROLLER_RESET:
			fprintf(stderr, "vfnvme: %s: controller %d reset\n", sub->key, ev.controller);
			break;
		default:
			break;
		}
	}
}

/* The test hook: fail the path through controller 0 once its time has come. */
static void vf_mp_fail_hook(struct vf_sub *sub)
{
	if (!sub->fail_after_ms || sub->fail_done ||
	    vf_now_ns() - sub->opened_ns < (unsigned long long)sub->fail_after_ms * 1000000ULL)
		return;
	sub->fail_done = 1;
#if defined(VFNVME_MODEL)
	int rc = sub->fail_remove ? vfnvme_subsys_model_remove(sub->s, 0)
				  : vfnvme_subsys_model_set_ana(sub->s, 0, sub->fail_nsid,
								VFNVME_PATH_INACCESSIBLE);
	fprintf(stderr, "vfnvme: %s: test hook: %s controller 0%s\n", sub->key,
		sub->fail_remove ? "removing" : "ANA inaccessible on",
		rc ? " FAILED" : "");
	if (rc)
		vf_log_rc("mp_fail_after_ms", rc);
#endif
}

/* The Namespace Attachment test hook: detach, then attach again, on controller 0. */
static void vf_mp_attach_hook(struct vf_sub *sub)
{
	unsigned long long ms = (vf_now_ns() - sub->opened_ns) / 1000000ULL;
	int detach = sub->detach_after_ms && !sub->detach_done && ms >= sub->detach_after_ms;
	int attach = sub->attach_after_ms && sub->detach_done && !sub->attach_done &&
		     ms >= sub->attach_after_ms;
	if (!detach && !attach)
		return;
	if (detach)
		sub->detach_done = 1;
	else
		sub->attach_done = 1;
	int rc = vfnvme_subsys_namespace_attachment(sub->s, 0, sub->fail_nsid, attach);
	fprintf(stderr, "vfnvme: %s: test hook: namespace %u %s controller 0 at %llu ms%s\n",
		sub->key, sub->fail_nsid, attach ? "attached to" : "detached from", ms,
		rc ? " FAILED" : "");
	if (rc)
		vf_log_rc("vfnvme_subsys_namespace_attachment", rc);
}

static void *vf_mp_poller(void *arg)
{
	struct vf_sub *sub = arg;
	while (!atomic_load(&sub->stop)) {
		vf_mp_fail_hook(sub);
		vf_mp_attach_hook(sub);
		int rc = vfnvme_subsys_poll(sub->s);
		if (rc < 0)
			vf_log_rc("vfnvme_subsys_poll", rc);
		else if (rc > 0)
			vf_mp_report_events(sub);
		struct timespec ts = { 0, VF_MP_POLL_US * 1000L };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void vf_mp_poller_stop(struct vf_sub *sub)
{
	if (!sub->poller_running)
		return;
	atomic_store(&sub->stop, 1);
	pthread_join(sub->poller, NULL);
	sub->poller_running = 0;
}

/* Finds or opens the subsystem of a target. Call with vf_lock held. */

/* A multipath policy by the name mp_policy= takes (Linux's names). */
static const char *vf_policy_name(enum vfnvme_mp_policy p)
{
	switch (p) {
	case VFNVME_MP_POLICY_NUMA:
		return "numa";
	case VFNVME_MP_POLICY_ROUND_ROBIN:
		return "round-robin";
	case VFNVME_MP_POLICY_QUEUE_DEPTH:
		return "queue-depth";
	}
	return "unknown";
}

static struct vf_sub *vf_sub_get(const struct vf_target *t, const struct vf_options *o)
{
	char key[sizeof(((struct vf_sub *)0)->key)];
	if (t->model) {
		snprintf(key, sizeof(key), "model-subsystem:%s", t->id);
	} else if (t->subnqn[0]) {
		snprintf(key, sizeof(key), "%s", t->subnqn);
	} else {
		size_t n = 0;
		key[0] = 0;
		for (int i = 0; i < t->npaths && n + 16 < sizeof(key); i++)
			n += (size_t)snprintf(key + n, sizeof(key) - n, "%s%s", i ? "+" : "",
					      t->path_addr[i]);
	}
	struct vf_sub *free_slot = NULL;
	for (int i = 0; i < VF_MAX_SUBS; i++) {
		if (vf_subs[i].s && !strcmp(vf_subs[i].key, key))
			return &vf_subs[i];
		if (!vf_subs[i].s && !free_slot)
			free_slot = &vf_subs[i];
	}
	if (!free_slot) {
		log_err("vfnvme: more than %d subsystems in one fio process\n", VF_MAX_SUBS);
		return NULL;
	}
	struct vfnvme_subsys_opts so = {
		.size = sizeof(so),
		.fail_if_no_path = o && !o->mp_queue_if_no_path,
		.delayed_removal_ms = o ? o->mp_delayed_removal_ms : 0,
	};
	struct vfnvme_ctrl_opts copts = { .size = sizeof(copts),
					  .admin_timeout_ms = t->admin_timeout_ms,
					  .io_timeout_ms = t->io_timeout_ms,
					  .io_retries = t->io_retries,
					  .no_iommu = t->no_iommu };
	struct vfnvme_subsys *s = NULL;
	int rc;
	if (t->model) {
#if defined(VFNVME_MODEL)
		struct vfnvme_model_subsys_opts mo = {
			.size = sizeof(mo),
			.controllers = t->model_paths,
			.namespaces = t->mopts.namespaces,
			.lba_size = t->mopts.lba_size,
			.blocks = t->mopts.blocks,
			.latency_ns = t->mopts.latency_ns,
		};
		rc = vfnvme_subsys_open_model(&mo, &so, &s);
#else
		rc = VFNVME_ERR_UNSUPPORTED;
#endif
	} else if (t->subnqn[0]) {
		rc = vfnvme_subsys_open_nqn(t->subnqn, &copts, &so, &s);
	} else {
		const char *addrs[VF_MAX_CTRLS];
		for (int i = 0; i < t->npaths; i++)
			addrs[i] = t->path_addr[i];
		rc = vfnvme_subsys_open(addrs, (size_t)t->npaths, &copts, &so, &s);
	}
	if (rc) {
		log_err("vfnvme: opening subsystem %s failed: %s (%s)\n", key, vfnvme_strerror(rc),
			vfnvme_last_error());
		return NULL;
	}
	if (o && o->mp_policy && *o->mp_policy) {
		rc = vfnvme_subsys_set_policy_name(s, 0, o->mp_policy);
		if (rc) {
			log_err("vfnvme: mp_policy=%s: %s (%s)\n", o->mp_policy, vfnvme_strerror(rc),
				vfnvme_last_error());
			vfnvme_subsys_close(s);
			return NULL;
		}
	}
	memset(free_slot, 0, sizeof(*free_slot));
	snprintf(free_slot->key, sizeof(free_slot->key), "%s", key);
	free_slot->s = s;
	free_slot->model = t->model;
	free_slot->opened_ns = vf_now_ns();
	if (o && o->mp_fail_after_ms) {
		if (!t->model) {
			log_err("vfnvme: mp_fail_after_ms is a test hook of model subsystems "
				"(trtype=model paths=N)\n");
			vfnvme_subsys_close(s);
			free_slot->s = NULL;
			return NULL;
		}
		free_slot->fail_after_ms = o->mp_fail_after_ms;
		free_slot->fail_remove = o->mp_fail && !strcasecmp(o->mp_fail, "remove");
	}
	free_slot->fail_nsid = t->nsid;
	if (o) {
		free_slot->detach_after_ms = o->mp_detach_after_ms;
		free_slot->attach_after_ms = o->mp_attach_after_ms;
	}
	/* Report how the subsystem looks. */
	char nqn[256];
	int n = vfnvme_subsys_info(s, nqn, sizeof(nqn));
	for (int i = 0; i < n; i++) {
		struct vfnvme_subsys_ctrl_info ci;
		if (vfnvme_subsys_controller(s, (uint32_t)i, &ci) == 0)
			fprintf(stderr, "vfnvme: subsystem %s: controller %d: %s\n", nqn, i,
				(const char *)ci.name);
	}
	return free_slot;
}

/* A file that is a head: its subsystem and geometry. Call with vf_lock held. */
int vf_mp_attach_file(struct thread_data *td, struct fio_file *f, const struct vf_target *t)
{
	struct vf_sub *sub = vf_sub_get(t, td->eo);
	if (!sub)
		return 1;
	struct vfnvme_head_info hi;
	int rc = vfnvme_subsys_head_info(sub->s, t->nsid, &hi);
	if (rc < 0) {
		log_err("vfnvme: %s: namespace %u: %s (%s)\n", f->file_name, t->nsid,
			vfnvme_strerror(rc), vfnvme_last_error());
		return 1;
	}
	if (!hi.lba_size) {
		log_err("vfnvme: %s: namespace %u has no path now\n", f->file_name, t->nsid);
		return 1;
	}
	struct vf_file *vf = vf_file_new();
	if (!vf)
		return 1;
	vf->s = sub;
	vf->nsid = t->nsid;
	vf->lba_size = hi.lba_size;
	vf->lba_shift = __builtin_ctz(hi.lba_size);
	vf->blocks = hi.blocks;
	FILE_SET_ENG_DATA(f, vf);
	f->real_file_size = hi.blocks * hi.lba_size;
	f->filetype = FIO_TYPE_BLOCK;
	fio_file_set_size_known(f);
	fprintf(stderr, "vfnvme: %s: head of ns %u (%s), %u path(s), policy %s\n", f->file_name,
		t->nsid, (const char *)hi.unique_id, hi.paths, vf_policy_name(hi.policy));
	if (rc > 1)
		fprintf(stderr, "vfnvme: %s: WARNING: the controllers report %d different identifiers "
			"for namespace %u: %d heads, never merged; this one has %u path(s)\n",
			f->file_name, rc, t->nsid, rc, hi.paths);
	return 0;
}

/* Opens the thread's channels, one per head. */
int vf_mp_init(struct thread_data *td, struct vf_thread *vt)
{
	struct vf_mp_thread *mp = calloc(1, sizeof(*mp));
	if (!mp)
		return 1;
	vt->mp = mp;
	vt->be = &vf_mp_backend;
	mp->chans = calloc(td->o.nr_files ? td->o.nr_files : 1, sizeof(*mp->chans));
	if (!mp->chans)
		return 1;
	struct fio_file *f;
	unsigned int i;
	for_each_file(td, f, i) {
		struct vf_file *vf = FILE_ENG_DATA(f);
		if (mp->sub && vf->s != mp->sub) {
			log_err("vfnvme: %s: a job's heads must all be of one subsystem\n",
				f->file_name);
			return 1;
		}
		mp->sub = vf->s;
		/* Each path's queue pair holds the whole job's depth (twice, as for controllers,
		 * so the completion doorbell can trail the resubmissions; at least VF_MIN_RING;
		 * the driver caps it at what each controller allows). */
		unsigned int ring = 2 * vt->depth + 1;
		struct vfnvme_channel_opts co = {
			.size = sizeof(co),
			.qpair_depth = ring < VF_MIN_RING ? VF_MIN_RING : ring,
			.capacity = vt->depth,
		};
		struct vf_chan *c = &mp->chans[mp->nchans];
		int rc = vfnvme_channel_open(vf->s->s, vf->nsid, &co, &c->ch);
		if (rc) {
			log_err("vfnvme: %s: opening a channel: %s (%s)\n", f->file_name,
				vfnvme_strerror(rc), vfnvme_last_error());
			return 1;
		}
		const struct vf_options *o = td->eo;
		if (o && o->enable_sgl)
			log_info("vfnvme: %s: enable_sgl=1 applies to single controllers; a "
				 "multipath head's channels use PRPs\n",
				 f->file_name);
		c->vf = vf;
		c->name = f->file_name;
		mp->nchans++;
	}
	pthread_mutex_lock(&vf_lock);
	struct vf_sub *sub = mp->sub;
	int rc = 0;
	if (sub->users++ == 0 && !sub->poller_running) {
		atomic_store(&sub->stop, 0);
		rc = pthread_create(&sub->poller, NULL, vf_mp_poller, sub);
		if (rc) {
			sub->users--;
			log_err("vfnvme: %s: starting the subsystem poller: %s\n", sub->key,
				strerror(rc));
		} else {
			sub->poller_running = 1;
		}
	}
	pthread_mutex_unlock(&vf_lock);
	if (rc)
		mp->sub = NULL;
	return rc ? 1 : 0;
}

static struct vf_chan *vf_mp_chan_of(struct vf_mp_thread *mp, struct vf_file *vf)
{
	for (unsigned int i = 0; i < mp->nchans; i++)
		if (mp->chans[i].vf == vf)
			return &mp->chans[i];
	return NULL;
}

/* Queues io_u on the thread's channel of its head (vf_mp_backend.submit). */
static int vf_mp_submit(struct vf_thread *vt, struct io_u *io_u, struct vf_file *vf, uint64_t lba,
			uint32_t blocks)
{
	struct vf_iou *e = io_u->engine_data;
	struct vf_chan *c = vf_mp_chan_of(vt->mp, vf);
	int rc;
	if (!c)
		return EINVAL;
	e->chan = c;
	switch (io_u->ddir) {
	case DDIR_READ:
		rc = vfnvme_channel_read(c->ch, io_u->xfer_buf, lba, blocks, e);
		break;
	case DDIR_WRITE:
		rc = vfnvme_channel_write(c->ch, io_u->xfer_buf, lba, blocks, e);
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
	case DDIR_SYNC_FILE_RANGE:
		rc = vfnvme_channel_flush(c->ch, e);
		break;
	default:
		log_err("vfnvme: %s: multipath heads take reads, writes and flushes (no trim)\n",
			io_u->file->file_name);
		return EOPNOTSUPP;
	}
	if (rc)
		return rc;
	e->inflight = &c->inflight;
	c->inflight++;
	c->uncommitted++;
	return 0;
}

static void vf_mp_commit(struct vf_thread *vt)
{
	struct vf_mp_thread *mp = vt->mp;
	for (unsigned int i = 0; i < mp->nchans; i++) {
		if (mp->chans[i].uncommitted) {
			vfnvme_channel_commit(mp->chans[i].ch);
			mp->chans[i].uncommitted = 0;
		}
	}
}

static int vf_mp_poll(void *q, struct vfnvme_completion *out, uint32_t max)
{
	return vfnvme_channel_poll(q, out, max);
}

static int vf_mp_reap(struct vf_thread *vt)
{
	struct vf_mp_thread *mp = vt->mp;
	for (unsigned int i = 0; i < mp->nchans; i++) {
		struct vf_chan *c = &mp->chans[i];
		if (vf_poll_ready(vt, c->ch, &c->inflight, &c->uncommitted))
			return -EIO;
	}
	return 0;
}

static unsigned int vf_mp_inflight(struct vf_thread *vt)
{
	unsigned int n = 0;
	for (unsigned int i = 0; i < vt->mp->nchans; i++)
		n += vt->mp->chans[i].inflight;
	return n;
}

/* Prints the I/Os per path of a channel (the job's share of the head). */
static void vf_mp_print_paths(struct vf_sub *sub, struct vf_chan *c)
{
	struct vfnvme_channel_stats st;
	if (vfnvme_channel_stats(c->ch, &st))
		return;
	char line[2048];
	size_t n = 0;
	for (int i = 0; i < VFNVME_MAX_PATHS && n + 64 < sizeof(line); i++) {
		struct vfnvme_subsys_ctrl_info ci;
		if (vfnvme_subsys_controller(sub->s, (uint32_t)i, &ci))
			break;
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %s=%llu", (const char *)ci.name,
				      (unsigned long long)st.per_path[i]);
	}
	line[n] = 0;
	fprintf(stderr,
		"vfnvme: %s: I/Os per path:%s (failovers %llu, queued for a path %llu, failed "
		"for want of a path %llu)\n",
		c->name, line, (unsigned long long)st.failovers, (unsigned long long)st.queued,
		(unsigned long long)st.failed_no_path);
}

static void vf_mp_cleanup(struct thread_data *td, struct vf_thread *vt)
{
	struct vf_mp_thread *mp = vt->mp;
	if (!mp)
		return;
	for (unsigned int i = 0; i < mp->nchans; i++) {
		struct vf_chan *c = &mp->chans[i];
		int stuck = vf_drain(vt, c->ch, &c->inflight);
		if (mp->sub)
			vf_mp_print_paths(mp->sub, c);
		if (stuck) {
			log_err("vfnvme: %s: %u I/O(s) still outstanding at cleanup; leaving the "
				"channel open\n", c->name, c->inflight);
			continue;
		}
		int rc = vfnvme_channel_close(c->ch);
		if (rc)
			vf_log_rc("vfnvme_channel_close", rc);
	}
	if (mp->sub) {
		pthread_mutex_lock(&vf_lock);
		if (mp->sub->users && --mp->sub->users == 0)
			vf_mp_poller_stop(mp->sub);
		pthread_mutex_unlock(&vf_lock);
	}
	free(mp->chans);
	free(mp);
	vt->mp = NULL;
}

static int vf_mp_iomem_alloc(struct thread_data *td, struct vf_thread *vt, size_t total_mem)
{
	struct vf_mp_thread *mp = vt->mp;
	void *p = NULL;
	int rc = mp->sub ? vfnvme_subsys_dma_alloc(mp->sub->s, total_mem, &p, NULL)
			 : VFNVME_ERR_INVALID_ARGUMENT;
	if (rc) {
		log_err("vfnvme: allocating %zu bytes of DMA memory: %s (%s)\n", total_mem,
			vfnvme_strerror(rc), vfnvme_last_error());
		return 1;
	}
	td->orig_buffer = p;
	mp->mem_start = (uintptr_t)p;
	mp->mem_end = (uintptr_t)p + total_mem;
	return 0;
}

static void vf_mp_iomem_free(struct thread_data *td, struct vf_thread *vt)
{
	struct vf_mp_thread *mp = vt->mp;
	if (mp->sub && td->orig_buffer)
		vfnvme_subsys_dma_free(mp->sub->s, td->orig_buffer);
	td->orig_buffer = NULL;
	mp->mem_start = mp->mem_end = 0;
}

/* Closes every subsystem (the engine is unloaded). */
void vf_mp_unload(void)
{
	pthread_mutex_lock(&vf_lock);
	for (int i = 0; i < VF_MAX_SUBS; i++) {
		if (!vf_subs[i].s)
			continue;
		vf_mp_poller_stop(&vf_subs[i]);
		int rc = vfnvme_subsys_close(vf_subs[i].s);
		if (rc)
			vf_log_rc("vfnvme_subsys_close", rc);
		vf_subs[i].s = NULL;
	}
	pthread_mutex_unlock(&vf_lock);
}

const struct vf_backend vf_mp_backend = VF_BACKEND(vf_mp, "vfnvme_channel_poll", false);
