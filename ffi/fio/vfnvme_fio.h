/*
 * vfnvme_fio.h: what the parts of the vfnvme fio engine share: vfnvme_fio.c (the engine's
 * hooks, filenames, controllers and their queue pairs) and vfnvme_fio_mp.c (multipath heads and
 * their channels). The engine's hooks reach a thread's queue pairs or channels through one
 * backend table (struct vf_backend).
 */
#ifndef VFNVME_FIO_H
#define VFNVME_FIO_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "fio.h"

#include "vfnvme.h"

/* The engine is one shared object: its own symbols stay inside it. */
#pragma GCC visibility push(hidden)

struct vf_backend;

#define VF_MAX_CTRLS 32
#define VF_KEY_LEN 128
/* How often the admin poller reaps a controller's asynchronous events. */
#define VF_ADMIN_POLL_MS 100
/* Fewest entries of a queue pair's ring (one 4 KiB page of submission entries). At a low
 * iodepth, 2 * iodepth + 1 entries leave no room to defer the CQ head doorbell, which is then
 * written after every completion: a trapped MMIO write under emulation, and on a busy host a
 * third of the IOPS at iodepth=1 (docs/peers.md). */
#define VF_MIN_RING 64
/* Failed I/Os a thread reports with their NVMe status (then only fio's own error count). */
#define VF_ERROR_REPORTS 32
/* How long cleanup waits for commands still in flight before it gives their queue pair up. */
#define VF_DRAIN_TIMEOUT_S 30

/* A controller shared by every file and thread of the process. */
struct vf_ctrl {
	char key[VF_KEY_LEN];
	struct vfnvme_ctrl *ctrl;
	/* fio threads with a queue pair on it (under vf_lock); the admin poller runs while > 0. */
	unsigned int users;
	int poller_running;
	pthread_t poller;
	pthread_mutex_t poller_lock;
	pthread_cond_t poller_wake; /* on CLOCK_MONOTONIC */
	int poller_stop; /* under poller_lock */
	/* Set by the admin poller when the controller reports an error; I/O threads waiting for
	 * completions then fail instead of polling forever. */
	atomic_int failed;
	/* Test hook (option reset_after_ms): reset the controller through the API once, this long
	 * after it was opened (0: never); opened_ns on CLOCK_MONOTONIC. */
	unsigned int reset_after_ms;
	unsigned long long opened_ns;
	int reset_done;
};

/* CLOCK_MONOTONIC in nanoseconds. */
static inline unsigned long long vf_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* The engine's options (fio's options table; td->eo). */
struct vf_options {
	void *pad; /* fio stores the thread_data pointer here: offset 0 is no option's */
	char *trtype;
	char *traddr;
	unsigned int ns;
	char *id;
	unsigned int namespaces;
	unsigned int lba_size;
	unsigned long long blocks;
	unsigned int latency_ns;
	unsigned long long seed;
	char *backing;
	unsigned int hang_reads;
	unsigned int admin_timeout_ms;
	unsigned int io_timeout_ms;
	unsigned int io_retries;
	unsigned int no_iommu;
	unsigned int reset_after_ms;
	unsigned int defer_sq_doorbell;
	unsigned int tsc_issue_time;
	unsigned int inline_qd1;
	unsigned int enable_sgl; /* SPDK's name: every read and write with SGLs */
	/* Multipath heads (vfnvme_fio_mp.c). */
	char *mp_policy;
	unsigned int mp_queue_if_no_path;
	unsigned int mp_delayed_removal_ms;
	unsigned int mp_fail_after_ms;
	char *mp_fail;
	unsigned int paths;
	unsigned int mp_detach_after_ms;
	unsigned int mp_attach_after_ms;
	/* Metadata and protection information (vfnvme_fio_md.c; SPDK's fio plugin's names). */
	unsigned int md_per_io_size;
	unsigned int pi_act;
	char *pi_chk;
	unsigned int apptag;
	unsigned int apptag_mask;
};

/* A job's metadata and PI options, parsed (vf_md_init). */
struct vf_md_opts {
	bool act; /* PRACT */
	uint8_t check; /* VFNVME_PI_CHECK_* bits */
	uint16_t app_tag;
	uint16_t app_mask;
	uint32_t md_per_io_size; /* 0: the largest I/O's blocks * ms */
};

struct vf_sub;

/* Per file: where its namespace lives (a controller's namespace, or a multipath head). */
struct vf_file {
	struct vf_ctrl *c;
	struct vf_sub *s; /* non-NULL for a multipath head (then c is NULL) */
	uint32_t nsid;
	uint32_t lba_size;
	uint32_t lba_shift;
	uint64_t blocks;
	/* The namespace's geometry; has_md: its format has metadata or PI (vfnvme_fio_md.c). */
	struct vfnvme_ns_info info;
	bool has_md;
};

/* Per thread and controller: the thread's queue pair and bounce buffers. */
struct vf_mp_thread;

struct vf_tq {
	struct vf_ctrl *c;
	struct vfnvme_qpair *qp;
	void **bounce; /* indexed by io_u->index, allocated on first use */
	unsigned int inflight; /* submitted, not yet reaped from the completion queue */
	unsigned int uncommitted; /* submitted since the last vfnvme_qpair_commit or poll */
};

/* Per thread (td->io_ops_data). */
struct vf_thread {
	struct vf_tq tq[VF_MAX_CTRLS];
	int ntq;
	struct vf_ctrl *mem_ctrl; /* provided td->orig_buffer */
	uintptr_t mem_start, mem_end; /* td->orig_buffer from iomem_alloc: DMA memory of mem_ctrl */
	bool mem_heap; /* no-IOMMU mode: td->orig_buffer is ordinary memory (too large for one
			* hugepage), every I/O goes through a bounce buffer */
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
	unsigned int errors_reported; /* vf_report_error lines so far (at most VF_ERROR_REPORTS) */
	bool tsc_issue_time; /* issue times from the TSC (vfnvme_fio_issue_time.c) */
	bool complete_inline; /* iodepth=1: queue() waits for the completion (vf_complete_inline) */
	struct vf_mp_thread *mp; /* the thread's channels when its files are multipath heads */
	const struct vf_backend *be; /* queue pairs (vf_qpair_backend) or channels (vf_mp_backend) */
	struct vf_md_opts md; /* metadata and PI options of the job */
};

/* Per io_u (io_u->engine_data). */
struct vf_chan;

struct vf_iou {
	struct vf_thread *vt;
	struct vf_tq *tq; /* where it was submitted */
	struct vf_chan *chan; /* or the multipath channel it was submitted on */
	unsigned int *inflight; /* the in-flight count of its queue pair or channel */
	struct io_u *io_u;
	void *bounce; /* non-NULL when the data goes through a bounce buffer */
	unsigned int idx; /* 0..depth-1 (io_u->index shares a union with engine_data) */
	uint64_t queued_tick; /* TSC when queue() took it (vfnvme_fio_issue_time.c) */
	/* A request with metadata (vfnvme_fio_md.c): its file (NULL: a plain request), LBA and
	 * blocks, and whether md_buf holds the interleaved blocks (else separate metadata). */
	struct vf_file *md_vf;
	uint64_t md_lba;
	uint32_t md_blocks;
	bool md_extended;
	void *md_buf; /* DMA memory of md_ctrl, md_len bytes, allocated on first use */
	struct vf_ctrl *md_ctrl;
	size_t md_len;
};


/* Parsed filename (with the job's options). */
struct vf_target {
	int model;
	char traddr[64];
	char id[32];
	uint32_t nsid;
	struct vfnvme_model_opts mopts;
	uint32_t admin_timeout_ms;
	uint32_t io_timeout_ms;
	uint32_t io_retries;
	bool no_iommu;
	uint32_t reset_after_ms;
	int have_trtype, have_traddr;
	/* A multipath head: traddr=A+B[+...] (npaths addresses), subnqn=NQN, or on the model
	 * paths=N (controllers of a model subsystem). */
	int mp;
	int npaths;
	char path_addr[VF_MAX_CTRLS][16];
	char subnqn[256];
	uint32_t model_paths;
};


/*
 * What the engine's hooks call for a thread's I/O: its queue pairs (vf_qpair_backend,
 * vfnvme_fio.c) or its channels on multipath heads (vf_mp_backend, vfnvme_fio_mp.c).
 */
struct vf_backend {
	/* Submits io_u (lba and blocks checked against the file's block size): a vfnvme status
	 * (0: queued, the io_u's inflight count raised), or a positive errno when it completes
	 * at once with that error (already logged). */
	int (*submit)(struct vf_thread *vt, struct io_u *io_u, struct vf_file *vf, uint64_t lba,
		      uint32_t blocks);
	/* Rings the doorbells of what was submitted since the last commit or poll. */
	void (*commit)(struct vf_thread *vt);
	/* Reaps completions into the ready ring (vf_poll_ready per queue pair or channel). */
	int (*reap)(struct vf_thread *vt);
	/* Requests submitted and not yet reaped. */
	unsigned int (*inflight)(struct vf_thread *vt);
	/* Polls one queue pair or channel into out[0..max]. */
	int (*poll)(void *q, struct vfnvme_completion *out, uint32_t max);
	const char *poll_name;
	int (*iomem_alloc)(struct thread_data *td, struct vf_thread *vt, size_t total_mem);
	void (*iomem_free)(struct thread_data *td, struct vf_thread *vt);
	void (*cleanup)(struct thread_data *td, struct vf_thread *vt);
	/* At iodepth=1, queue() may wait for the completion (vf_complete_inline). */
	bool inline_qd1;
};

/* The backend whose hooks are <prefix>_submit, <prefix>_commit, <prefix>_reap, <prefix>_inflight,
 * <prefix>_poll (calling the API function named poll_fn), <prefix>_iomem_alloc,
 * <prefix>_iomem_free and <prefix>_cleanup. */
#define VF_BACKEND(prefix, poll_fn, qd1)                                                      \
	{                                                                                     \
		.submit = prefix##_submit, .commit = prefix##_commit, .reap = prefix##_reap,  \
		.inflight = prefix##_inflight, .poll = prefix##_poll, .poll_name = poll_fn,   \
		.iomem_alloc = prefix##_iomem_alloc, .iomem_free = prefix##_iomem_free,       \
		.cleanup = prefix##_cleanup, .inline_qd1 = qd1,                               \
	}

extern const struct vf_backend vf_qpair_backend;
extern const struct vf_backend vf_mp_backend;

/* vfnvme_fio.c */
extern pthread_mutex_t vf_lock;
extern struct vf_file *vf_files_list[4096];
extern unsigned int vf_nfiles;
void vf_log_rc(const char *what, int rc);
double vf_now(void);
int vf_canon_pci(const char *in, char *out, size_t len);
/* Polls queue pair or channel q of the thread into its ready ring (if it has anything in
 * flight and the ring room): 0, or -EIO when the poll fails. */
int vf_poll_ready(struct vf_thread *vt, void *q, unsigned int *inflight,
		  unsigned int *uncommitted);
/* Polls queue pair or channel q until nothing of the thread is in flight there (completions
 * dropped): 0, or 1 if that did not happen within VF_DRAIN_TIMEOUT_S. */
int vf_drain(struct vf_thread *vt, void *q, unsigned int *inflight);
/* The file's vf_file (allocated, listed for the engine's unload), or NULL. */
struct vf_file *vf_file_new(void);

/* vfnvme_fio_md.c */
/* Parses the job's metadata options into vt->md and checks them against every file's format:
 * 0, or 1 after logging what can't work. */
int vf_md_init(struct thread_data *td, struct vf_thread *vt);
/* Submits a read or write of io_u on a namespace with metadata (data: fio's buffer or its
 * bounce buffer): a vfnvme status, or a positive errno (logged). */
int vf_md_submit(struct vf_thread *vt, struct vf_tq *tq, struct io_u *io_u, struct vf_file *vf,
		 uint64_t lba, uint32_t blocks, void *data);
/* After a successful request with metadata: verifies a read's PI (PRACT=0 with pi_chk) and
 * copies extended blocks' data into fio's buffer (data: where the data went). 0 or EIO. */
int vf_md_complete(struct vf_iou *e, struct io_u *io_u, void *data);
/* Frees the io_u's metadata buffer. */
void vf_md_free(struct vf_iou *e);

/* vfnvme_fio_mp.c */
int vf_mp_parse_traddr(struct vf_target *t, const char *what, const char *v);
int vf_mp_attach_file(struct thread_data *td, struct fio_file *f, const struct vf_target *t);
int vf_mp_init(struct thread_data *td, struct vf_thread *vt);
void vf_mp_unload(void);

#pragma GCC visibility pop

#endif
