/*
 * vfnvme_fio.c: fio ioengine over libvfnvme (userspace polled NVMe over VFIO).
 *
 * Load into fio with ioengine=external:/path/to/vfnvme_fio.so, thread=1.
 *
 * Filenames (one file = one namespace; several files may share a controller):
 *   trtype=PCIe traddr=0000.00.10.0 ns=1     SPDK's syntax ('.' or '\:' in traddr)
 *   0000.00.10.0/1                           short form (PCI address / nsid)
 *   trtype=model ns=1 [id=NAME] [namespaces=N] [lba_size=B] [blocks=N] [latency_ns=T]
 *                                            the in-memory controller model (host tests)
 * fio splits filenames at ':' unless escaped, so write PCI addresses with '.' or '\:'.
 *
 * One controller per traddr (or model id) is shared by every file and thread of the process;
 * each fio thread gets one queue pair per controller it uses. queue() only queues; commit()
 * rings a doorbell at most once, and only when the device would otherwise idle. getevents()
 * polls only when it has nothing left to hand out: one poll reaps every completion the device
 * has posted into a ready ring (and rings for what is still unrung), and the next calls are
 * served from that ring; submissions queued meanwhile are rung together once half of what is in
 * flight waits for a doorbell. At most one doorbell per batch, never one per I/O. Buffers come from
 * the driver's DMA memory (iomem_alloc), so I/O is zero-copy; a file on a controller other than
 * the one that provided the thread's memory goes through per-io_u bounce buffers.
 *
 * Per I/O the engine makes one submit call (the data pointer is range-checked against the
 * thread's iomem, no translation call) and shares one vfnvme_qpair_poll_completions call per
 * batch of completions (no callbacks); it counts commands in flight itself.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"
#include "optgroup.h"

#include "vfnvme.h"

#define VF_MAX_CTRLS 32
#define VF_KEY_LEN 128

/* A controller shared by every file and thread of the process. */
struct vf_ctrl {
	char key[VF_KEY_LEN];
	struct vfnvme_ctrl *ctrl;
};

/* Per file: where its namespace lives. */
struct vf_file {
	struct vf_ctrl *c;
	uint32_t nsid;
	uint32_t lba_size;
	uint32_t lba_shift;
	uint64_t blocks;
};

/* Per thread and controller: the thread's queue pair and bounce buffers. */
struct vf_tq {
	struct vf_ctrl *c;
	struct vfnvme_qpair *qp;
	void **bounce; /* indexed by io_u->index, allocated on first use */
	unsigned int inflight; /* submitted, not yet reaped from the completion queue */
	unsigned int unrung; /* submitted since this queue pair's doorbell was last rung */
};

/* Per thread (td->io_ops_data). */
struct vf_thread {
	struct vf_tq tq[VF_MAX_CTRLS];
	int ntq;
	struct vf_ctrl *mem_ctrl; /* provided td->orig_buffer */
	uintptr_t mem_start, mem_end; /* td->orig_buffer from iomem_alloc: DMA memory of mem_ctrl */
	struct vf_file *last_vf; /* file of the last io_u and its queue pair (a one-entry cache) */
	struct vf_tq *last_tq;
	struct io_u **events; /* what the last getevents returned (event() reads it) */
	unsigned int nevents;
	struct io_u **ready; /* completed, not yet returned by getevents: a ring of depth slots */
	unsigned int ready_head, ready_count;
	struct vfnvme_completion *cpls; /* getevents' batch from vfnvme_qpair_poll_completions */
	struct io_u **queued; /* queued since the last commit (for issue time) */
	unsigned int nqueued;
	unsigned int depth;
	unsigned int niou;
	unsigned long long max_bs;
	unsigned int admin_tick; /* getevents calls since the controllers' admin queues were polled */
};

/* Per io_u (io_u->engine_data). */
struct vf_iou {
	struct vf_thread *vt;
	struct vf_tq *tq; /* where it was submitted */
	struct io_u *io_u;
	void *bounce; /* non-NULL when the data goes through a bounce buffer */
	unsigned int idx; /* 0..depth-1 (io_u->index shares a union with engine_data) */
};

static void vf_done(struct vf_iou *e, const struct vfnvme_cpl *cpl);

static pthread_mutex_t vf_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vf_ctrl vf_ctrls[VF_MAX_CTRLS];

static void vf_log_rc(const char *what, int rc)
{
	log_err("vfnvme: %s failed: %s (%s)\n", what, vfnvme_strerror(rc), vfnvme_last_error());
}

/* Parsed filename. */
struct vf_target {
	int model;
	char traddr[64];
	char id[32];
	uint32_t nsid;
	struct vfnvme_model_opts mopts;
};

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
static int vf_canon_pci(const char *in, char *out, size_t len)
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

static int vf_parse_filename(const char *name, struct vf_target *t)
{
	memset(t, 0, sizeof(*t));
	t->nsid = 1;
	snprintf(t->id, sizeof(t->id), "0");
	if (!strchr(name, '=')) {
		/* Short form: ADDR[/NSID] or model[/NSID]. */
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
		if (vf_canon_pci(addr, t->traddr, sizeof(t->traddr))) {
			log_err("vfnvme: filename '%s' is neither 'trtype=... traddr=... ns=N' nor "
				"'0000.00.10.0/1'\n", name);
			return -1;
		}
		return 0;
	}

	char buf[512];
	snprintf(buf, sizeof(buf), "%s", name);
	int have_trtype = 0, have_traddr = 0;
	char *save = NULL;
	for (char *tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq) {
			log_err("vfnvme: filename '%s': '%s' is not key=value\n", name, tok);
			return -1;
		}
		*eq = 0;
		const char *k = tok, *v = eq + 1;
		uint64_t x = 0;
		if (!strcasecmp(k, "trtype")) {
			have_trtype = 1;
			if (!strcasecmp(v, "pcie"))
				t->model = 0;
			else if (!strcasecmp(v, "model"))
				t->model = 1;
			else {
				log_err("vfnvme: filename '%s': trtype must be PCIe or model\n", name);
				return -1;
			}
		} else if (!strcasecmp(k, "traddr")) {
			have_traddr = 1;
			if (vf_canon_pci(v, t->traddr, sizeof(t->traddr))) {
				log_err("vfnvme: filename '%s': bad traddr '%s' (use 0000.00.10.0)\n", name, v);
				return -1;
			}
		} else if (!strcasecmp(k, "id")) {
			snprintf(t->id, sizeof(t->id), "%s", v);
		} else if (!strcasecmp(k, "backing")) {
			if (!strcasecmp(v, "null"))
				t->mopts.null_data = true;
			else if (strcasecmp(v, "ram")) {
				log_err("vfnvme: filename '%s': backing must be ram or null\n", name);
				return -1;
			}
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
			else {
				log_err("vfnvme: filename '%s': unknown key '%s' (known: trtype traddr ns "
					"id namespaces lba_size blocks latency_ns seed backing)\n", name, k);
				return -1;
			}
			if (vf_parse_u64(v, &x) || (u32 && x > 0xffffffffu)) {
				log_err("vfnvme: filename '%s': value of '%s' is not a number\n", name, k);
				return -1;
			}
			if (u32)
				*u32 = (uint32_t)x;
			else
				*u64 = x;
			if (u32 == &t->nsid && x == 0) {
				log_err("vfnvme: filename '%s': ns must be 1 or more\n", name);
				return -1;
			}
		}
	}
	if (!have_trtype) {
		log_err("vfnvme: filename '%s': trtype=PCIe or trtype=model is missing\n", name);
		return -1;
	}
	if (!t->model && !have_traddr) {
		log_err("vfnvme: filename '%s': traddr=0000.00.10.0 is missing\n", name);
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
	int rc = t->model ? vfnvme_ctrl_open_model(&t->mopts, &ctrl)
			  : vfnvme_ctrl_open(t->traddr, NULL, &ctrl);
	if (rc) {
		log_err("vfnvme: opening %s failed: %s (%s)\n", key, vfnvme_strerror(rc),
			vfnvme_last_error());
		return NULL;
	}
	snprintf(freeslot->key, sizeof(freeslot->key), "%s", key);
	freeslot->ctrl = ctrl;
	return freeslot;
}

/*
 * Controllers and per-file data live until the engine is unloaded (the last fio thread closes
 * it): fio frees its files before the engine's cleanup runs, so they can't be released there.
 */
static struct vf_file *vf_files_list[4096];
static unsigned int vf_nfiles;

__attribute__((destructor)) static void vf_unload(void)
{
	pthread_mutex_lock(&vf_lock);
	for (int i = 0; i < VF_MAX_CTRLS; i++) {
		if (!vf_ctrls[i].ctrl)
			continue;
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
		int rc = vfnvme_ctrl_close(vf_ctrls[i].ctrl);
		if (rc)
			vf_log_rc("vfnvme_ctrl_close", rc);
		vf_ctrls[i].ctrl = NULL;
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
		if (vf_parse_filename(f->file_name, &t)) {
			ret = 1;
			break;
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
		if (!info.io_supported) {
			/* Refused here, before fio starts: the driver would refuse every I/O anyway. */
			log_err("vfnvme: %s: namespace %u is formatted with %u B of metadata per block "
				"(%s%s): vfnvme does not transfer metadata or protection information, "
				"so I/O to it is refused; reformat it to an LBA format without metadata "
				"(vfnvme format %s --nsid %u --yes; erases its data) or use another "
				"namespace\n",
				f->file_name, t.nsid, info.metadata_size,
				info.metadata_extended ? "extended LBA" : "separate buffer",
				info.protection_type ? ", protection information" : "",
				t.model ? "--model" : t.traddr, t.nsid);
			ret = 1;
			break;
		}
		struct vf_file *vf = vf_nfiles < 4096 ? calloc(1, sizeof(*vf)) : NULL;
		if (!vf) {
			log_err("vfnvme: too many files\n");
			ret = 1;
			break;
		}
		vf_files_list[vf_nfiles++] = vf;
		vf->c = c;
		vf->nsid = t.nsid;
		vf->lba_size = info.lba_size;
		vf->lba_shift = __builtin_ctz(info.lba_size);
		vf->blocks = info.blocks;
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

static void vf_cleanup(struct thread_data *td)
{
	struct vf_thread *vt = td->io_ops_data;
	if (vt) {
		for (int i = 0; i < vt->ntq; i++) {
			struct vf_tq *tq = &vt->tq[i];
			/* Drain what is still in flight, then free the queue pair. */
			while (tq->qp && vfnvme_qpair_outstanding(tq->qp) > 0) {
				int n = vfnvme_qpair_poll_completions(tq->qp, vt->depth, vt->cpls);
				if (n < 0)
					break;
				for (int j = 0; j < n; j++)
					vf_done(vt->cpls[j].arg, &vt->cpls[j].cpl);
			}
			if (tq->bounce) {
				for (unsigned int j = 0; j < vt->depth; j++)
					vfnvme_dma_free(tq->c->ctrl, tq->bounce[j]);
				free(tq->bounce);
			}
			int rc = vfnvme_qpair_free(tq->qp);
			if (rc)
				vf_log_rc("vfnvme_qpair_free", rc);
		}
		free(vt->events);
		free(vt->ready);
		free(vt->queued);
		free(vt->cpls);
		free(vt);
		td->io_ops_data = NULL;
	}
}

static int vf_init(struct thread_data *td)
{
	struct fio_file *f;
	unsigned int i;

	if (vf_attach_files(td))
		return 1;
	struct vf_thread *vt = calloc(1, sizeof(*vt));
	if (!vt)
		return 1;
	td->io_ops_data = vt;
	vt->depth = td->o.iodepth ? td->o.iodepth : 1;
	vt->max_bs = td_max_bs(td);
	vt->events = calloc(vt->depth, sizeof(*vt->events));
	vt->ready = calloc(vt->depth, sizeof(*vt->ready));
	vt->queued = calloc(vt->depth, sizeof(*vt->queued));
	vt->cpls = calloc(vt->depth, sizeof(*vt->cpls));
	if (!vt->events || !vt->ready || !vt->queued || !vt->cpls)
		goto fail;
	for_each_file(td, f, i) {
		struct vf_file *vf = FILE_ENG_DATA(f);
		if (vf_tq_of(vt, vf->c))
			continue;
		struct vf_tq *tq = &vt->tq[vt->ntq];
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
		if (ci.max_queue_depth && qd > ci.max_queue_depth)
			qd = ci.max_queue_depth;
		rc = vfnvme_qpair_alloc(vf->c->ctrl, (uint32_t)qd, &tq->qp);
		if (rc) {
			log_err("vfnvme: %s: allocating a queue pair of depth %llu: %s (%s)\n",
				f->file_name, qd, vfnvme_strerror(rc), vfnvme_last_error());
			goto fail;
		}
		tq->c = vf->c;
		vt->ntq++;
	}
	if (vt->ntq)
		vt->mem_ctrl = vt->tq[0].c;
	return 0;
fail:
	vf_cleanup(td);
	return 1;
}

static int vf_iomem_alloc(struct thread_data *td, size_t total_mem)
{
	struct vf_thread *vt = td->io_ops_data;
	if (!vt || !vt->mem_ctrl) {
		log_err("vfnvme: iomem_alloc before init (no controller)\n");
		return 1;
	}
	void *p = NULL;
	int rc = vfnvme_dma_alloc(vt->mem_ctrl->ctrl, total_mem, &p, NULL);
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

static void vf_iomem_free(struct thread_data *td)
{
	struct vf_thread *vt = td->io_ops_data;
	if (vt && vt->mem_ctrl && td->orig_buffer)
		vfnvme_dma_free(vt->mem_ctrl->ctrl, td->orig_buffer);
	if (vt)
		vt->mem_start = vt->mem_end = 0;
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
	free(io_u->engine_data);
	io_u->engine_data = NULL;
}

/* Completes the io_u of e (submitted without a callback; reaped in a batch by getevents). */
static void vf_done(struct vf_iou *e, const struct vfnvme_cpl *cpl)
{
	struct io_u *io_u = e->io_u;
	struct vf_thread *vt = e->vt;

	e->tq->inflight--;
	if (cpl->status || cpl->rc) {
		io_u->error = EIO;
		io_u->resid = io_u->xfer_buflen;
	} else {
		io_u->error = 0;
		io_u->resid = 0;
		if (e->bounce && io_u->ddir == DDIR_READ)
			memcpy(io_u->xfer_buf, e->bounce, io_u->xfer_buflen);
	}
	if (vt->ready_count < vt->depth) {
		unsigned int slot = vt->ready_head + vt->ready_count;
		vt->ready[slot >= vt->depth ? slot - vt->depth : slot] = io_u;
		vt->ready_count++;
	}
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

static enum fio_q_status vf_queue(struct thread_data *td, struct io_u *io_u)
{
	struct vf_thread *vt = td->io_ops_data;
	struct vf_file *vf = FILE_ENG_DATA(io_u->file);
	struct vf_iou *e = io_u->engine_data;
	struct vf_tq *tq;
	int rc;

	if (vf == vt->last_vf && vf) {
		tq = vt->last_tq;
	} else {
		tq = vf ? vf_tq_of(vt, vf->c) : NULL;
		vt->last_vf = vf;
		vt->last_tq = tq;
	}

	fio_ro_check(td, io_u);
	if (!tq) {
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	e->vt = vt;
	e->tq = tq;
	uint64_t mask = vf->lba_size - 1;
	if ((io_u->offset & mask) || (io_u->xfer_buflen & mask)) {
		log_err("vfnvme: %s: I/O at %llu length %llu is not a multiple of the %u-byte block\n",
			io_u->file->file_name, io_u->offset, io_u->xfer_buflen, vf->lba_size);
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	uint64_t lba = io_u->offset >> vf->lba_shift;
	uint32_t blocks = (uint32_t)(io_u->xfer_buflen >> vf->lba_shift);

	switch (io_u->ddir) {
	case DDIR_READ:
	case DDIR_WRITE: {
		void *data = vf_data(vt, tq, io_u);
		if (!data) {
			log_err("vfnvme: no DMA buffer for %s\n", io_u->file->file_name);
			io_u->error = ENOMEM;
			return FIO_Q_COMPLETED;
		}
		rc = io_u->ddir == DDIR_READ
			     ? vfnvme_qpair_read(tq->qp, vf->nsid, data, lba, blocks, NULL, e)
			     : vfnvme_qpair_write(tq->qp, vf->nsid, data, lba, blocks, NULL, e);
		break;
	}
	case DDIR_TRIM: {
		struct vfnvme_range r = { .lba = lba, .blocks = blocks };
		e->bounce = NULL;
		rc = vfnvme_qpair_deallocate(tq->qp, vf->nsid, &r, 1, NULL, e);
		break;
	}
	case DDIR_SYNC:
	case DDIR_DATASYNC:
	case DDIR_SYNC_FILE_RANGE:
		e->bounce = NULL;
		rc = vfnvme_qpair_flush(tq->qp, vf->nsid, NULL, e);
		break;
	default:
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	if (rc == VFNVME_ERR_QUEUE_FULL)
		return FIO_Q_BUSY;
	if (rc) {
		log_err("vfnvme: %s: submitting failed: %s (%s)\n", io_u->file->file_name,
			vfnvme_strerror(rc), vfnvme_last_error());
		io_u->error = rc == VFNVME_ERR_OUT_OF_RANGE ? EINVAL : EIO;
		return FIO_Q_COMPLETED;
	}
	tq->inflight++;
	tq->unrung++;
	if (vt->nqueued < vt->depth)
		vt->queued[vt->nqueued++] = io_u;
	return FIO_Q_QUEUED;
}

static int vf_commit(struct thread_data *td)
{
	struct vf_thread *vt = td->io_ops_data;
	if (!vt->nqueued)
		return 0;
	/*
	 * Ring a queue's doorbell now only when the device would otherwise sit idle: when every
	 * command in flight on it is one queued since the last commit. When older commands are
	 * still in flight, fio reaps them next, and getevents() (vfnvme_qpair_poll_completions
	 * commits first) rings for everything queued meanwhile: one doorbell per batch, even when
	 * fio commits after every io_u (its default iodepth_batch=1).
	 */
	for (int i = 0; i < vt->ntq; i++) {
		struct vf_tq *tq = &vt->tq[i];
		if (tq->unrung && tq->inflight <= tq->unrung) {
			vfnvme_qpair_commit(tq->qp);
			tq->unrung = 0;
		}
	}
	if (fio_fill_issue_time(td)) {
		struct timespec now;
		fio_gettime(&now, NULL);
		for (unsigned int i = 0; i < vt->nqueued; i++) {
			memcpy(&vt->queued[i]->issue_time, &now, sizeof(now));
			io_u_queued(td, vt->queued[i]);
		}
	}
	io_u_mark_submit(td, vt->nqueued);
	vt->nqueued = 0;
	return 0;
}

/*
 * Now and then (every VF_ADMIN_EVERY getevents calls of a thread) reap the controllers'
 * asynchronous events: namespaces attached, detached or resized while the job runs. The driver
 * rescans what changed; the engine reports each change once. I/O to a namespace that went away
 * then fails with an error instead of reaching the device.
 */
#define VF_ADMIN_EVERY 4096

static void vf_admin_tick(struct vf_thread *vt)
{
	static const char *what[] = { "none", "added", "removed", "changed" };
	for (int i = 0; i < vt->ntq; i++) {
		struct vf_ctrl *c = vt->tq[i].c;
		int rc = vfnvme_ctrl_process_admin(c->ctrl);
		if (rc < 0) {
			vf_log_rc("vfnvme_ctrl_process_admin", rc);
			continue;
		}
		struct vfnvme_ns_event ev;
		while (vfnvme_ctrl_next_event(c->ctrl, &ev) == 1) {
			unsigned int k = (unsigned int)ev.kind;
			log_info("vfnvme: %s: namespace %u %s\n", c->key, ev.nsid,
				 k < sizeof(what) / sizeof(what[0]) ? what[k] : "?");
		}
	}
}

/* Reaps what the thread's queue pairs have completed into the ready ring (one poll call per
 * queue pair, which also rings the doorbell for submissions not yet rung). */
static int vf_reap(struct vf_thread *vt)
{
	for (int i = 0; i < vt->ntq; i++) {
		struct vf_tq *tq = &vt->tq[i];
		unsigned int room = vt->depth - vt->ready_count;
		if (!tq->inflight || !room)
			continue;
		tq->unrung = 0; /* polling commits */
		int n = vfnvme_qpair_poll_completions(tq->qp, room, vt->cpls);
		if (n < 0) {
			vf_log_rc("vfnvme_qpair_poll_completions", n);
			return -EIO;
		}
		for (int j = 0; j < n; j++)
			vf_done(vt->cpls[j].arg, &vt->cpls[j].cpl);
	}
	return 0;
}

/*
 * fio asks for few events at a time (by default min = max = 1, once per I/O). Polling the device
 * for each would pay a poll, and a doorbell for the one io_u queued since, per I/O. Instead one
 * poll reaps everything the device has completed into the ready ring, and the following calls
 * are served from it; submissions queued meanwhile are rung together, once half of what is in
 * flight on a queue pair waits for its doorbell (or at the next poll, whichever comes first).
 */
static int vf_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			const struct timespec *t)
{
	struct vf_thread *vt = td->io_ops_data;
	if (++vt->admin_tick >= VF_ADMIN_EVERY) {
		vt->admin_tick = 0;
		vf_admin_tick(vt);
	}
	if (max > vt->depth)
		max = vt->depth;
	if (min > max)
		min = max;
	if (vt->ready_count >= min && vt->ready_count) {
		for (int i = 0; i < vt->ntq; i++) {
			struct vf_tq *tq = &vt->tq[i];
			if (tq->unrung && 2 * tq->unrung >= tq->inflight) {
				vfnvme_qpair_commit(tq->qp);
				tq->unrung = 0;
			}
		}
	} else {
		do {
			if (vf_reap(vt))
				return -EIO;
		} while (vt->ready_count < min);
	}
	unsigned int n = vt->ready_count < max ? vt->ready_count : max;
	for (unsigned int i = 0; i < n; i++) {
		vt->events[i] = vt->ready[vt->ready_head];
		if (++vt->ready_head == vt->depth)
			vt->ready_head = 0;
	}
	vt->ready_count -= n;
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
};
