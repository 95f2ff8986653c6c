/*
 * vfnvme_fio_md.c: reads and writes on namespaces formatted with metadata and protection
 * information, with SPDK's fio plugin's options: md_per_io_size, pi_act, pi_chk, apptag,
 * apptag_mask.
 *
 * fio always sees data only: its offsets and buffers count lba_size bytes per block, so that
 * fio's own verify (verify=crc32c, ...) checks the data whatever the format. The metadata lives
 * in the engine's per-io_u DMA buffers:
 *   - separate metadata (FLBAS bit 4 clear): fio's buffer is the data buffer (zero copy), and a
 *     metadata buffer of md_per_io_size bytes (unset: the largest I/O's blocks * ms) goes to
 *     MPTR;
 *   - extended LBAs: an interleaved buffer of blocks * (lba_size + ms) bytes; writes copy each
 *     block of fio's data into it, reads copy the data back out (one memcpy per block);
 *   - PRACT (pi_act=1) with 8 bytes of metadata (the PI alone): nothing but the data moves, for
 *     either layout, and fio's buffer goes to the device as is.
 * PRACT=0 on a format with PI: the engine generates each write's PI (vfnvme_pi_generate: CRC-16
 * T10-DIF guard, apptag, the LBA as reference tag) and, when pi_chk asks for checks, verifies
 * what each read returns (vfnvme_pi_verify) besides the controller's own checks (PRCHK). Other
 * metadata bytes are written as zeroes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"

#include "vfnvme.h"

#include "vfnvme_fio.h"

/* The PRCHK bits of a pi_chk list (GUARD,REFTAG,APPTAG, any case, ',' or ' ' between). -1 for an
 * unknown word (logged). */
static int vf_md_parse_chk(const char *text)
{
	int bits = 0;
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", text ? text : "");
	for (char *save = NULL, *w = strtok_r(buf, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		if (!strcasecmp(w, "GUARD"))
			bits |= VFNVME_PI_CHECK_GUARD;
		else if (!strcasecmp(w, "REFTAG"))
			bits |= VFNVME_PI_CHECK_REF;
		else if (!strcasecmp(w, "APPTAG"))
			bits |= VFNVME_PI_CHECK_APP;
		else {
			log_err("vfnvme: pi_chk: unknown check '%s' (use GUARD, REFTAG and APPTAG, "
				"separated by commas)\n", w);
			return -1;
		}
	}
	return bits;
}

/* Whether the metadata moves for the file's requests (not with PRACT on PI-only metadata). */
static bool vf_md_moves(const struct vf_file *vf, const struct vf_md_opts *o)
{
	return !(o->act && vf->info.protection_type && vf->info.metadata_size == 8);
}

int vf_md_init(struct thread_data *td, struct vf_thread *vt)
{
	const struct vf_options *eo = td->eo;
	struct vf_md_opts *o = &vt->md;
	memset(o, 0, sizeof(*o));
	if (eo) {
		int chk = vf_md_parse_chk(eo->pi_chk);
		if (chk < 0)
			return 1;
		o->act = eo->pi_act != 0;
		o->check = (uint8_t)chk;
		o->app_tag = (uint16_t)eo->apptag;
		o->app_mask = (uint16_t)eo->apptag_mask;
		o->md_per_io_size = eo->md_per_io_size;
		if (eo->apptag > 0xffff || eo->apptag_mask > 0xffff) {
			log_err("vfnvme: apptag and apptag_mask are 16-bit values (0x0 to 0xffff)\n");
			return 1;
		}
	}
	struct fio_file *f;
	unsigned int i;
	for_each_file(td, f, i) {
		struct vf_file *vf = FILE_ENG_DATA(f);
		const struct vfnvme_ns_info *in = &vf->info;
		if (!in->metadata_size && !in->protection_type) {
			if (o->act || o->check) {
				log_err("vfnvme: %s: namespace %u has no protection information: drop "
					"pi_act and pi_chk for it\n", f->file_name, vf->nsid);
				return 1;
			}
			continue;
		}
		if (!in->protection_type && (o->act || o->check)) {
			log_err("vfnvme: %s: namespace %u has %u B of metadata but no protection "
				"information: pi_act and pi_chk need a format with PI\n",
				f->file_name, vf->nsid, in->metadata_size);
			return 1;
		}
		if (in->protection_type == 3 && (o->check & VFNVME_PI_CHECK_REF)) {
			log_err("vfnvme: %s: namespace %u has PI type 3, which has no reference tag to "
				"check: drop REFTAG from pi_chk\n", f->file_name, vf->nsid);
			return 1;
		}
		if (td_trim(td)) {
			log_err("vfnvme: %s: namespace %u is formatted with metadata: trims are not "
				"supported on it; use rw=read, write, randread, randwrite or rw/randrw\n",
				f->file_name, vf->nsid);
			return 1;
		}
		uint64_t max_blocks = vt->max_bs / in->lba_size;
		uint64_t need = max_blocks * in->metadata_size;
		if (!in->metadata_extended && vf_md_moves(vf, o) && o->md_per_io_size &&
		    o->md_per_io_size < need) {
			log_err("vfnvme: %s: md_per_io_size=%u is too small for the largest I/O (%llu "
				"bytes = %llu blocks of %u B metadata): set md_per_io_size=%llu or more, "
				"or leave it unset\n",
				f->file_name, o->md_per_io_size, vt->max_bs,
				(unsigned long long)max_blocks, in->metadata_size,
				(unsigned long long)need);
			return 1;
		}
	}
	return 0;
}

/* The io_u's metadata DMA buffer (separate) or interleaved buffer (extended) on c, at least
 * len bytes: allocated on first use, again when the controller or the size changes. */
static void *vf_md_buf(struct vf_iou *e, struct vf_ctrl *c, size_t len)
{
	if (e->md_buf && (e->md_ctrl != c || e->md_len < len)) {
		if (e->md_ctrl->ctrl)
			vfnvme_dma_free(e->md_ctrl->ctrl, e->md_buf);
		e->md_buf = NULL;
	}
	if (!e->md_buf) {
		if (vfnvme_dma_alloc(c->ctrl, len, &e->md_buf, NULL)) {
			log_err("vfnvme: allocating a %zu-byte metadata buffer: %s\n", len,
				vfnvme_last_error());
			e->md_buf = NULL;
			return NULL;
		}
		e->md_ctrl = c;
		e->md_len = len;
	}
	return e->md_buf;
}

void vf_md_free(struct vf_iou *e)
{
	/* A buffer still in flight (cleanup gave its queue pair up) is refused and stays. */
	if (e->md_buf && e->md_ctrl && e->md_ctrl->ctrl)
		vfnvme_dma_free(e->md_ctrl->ctrl, e->md_buf);
	e->md_buf = NULL;
}

/* The request's PI options. */
static struct vfnvme_pi_opts vf_md_pi(const struct vf_md_opts *o)
{
	struct vfnvme_pi_opts pi = { .size = sizeof(pi) };
	pi.act = o->act;
	pi.check = o->check;
	pi.app_tag = o->app_tag;
	pi.app_mask = o->app_mask;
	/* The reference tag: the LBA's low 32 bits (the driver's default), for every type. */
	return pi;
}

int vf_md_submit(struct vf_thread *vt, struct vf_tq *tq, struct io_u *io_u, struct vf_file *vf,
		 uint64_t lba, uint32_t blocks, void *data)
{
	struct vf_iou *e = io_u->engine_data;
	const struct vfnvme_ns_info *in = &vf->info;
	const struct vf_md_opts *o = &vt->md;
	struct vfnvme_pi_opts pi = vf_md_pi(o);
	bool write = io_u->ddir == DDIR_WRITE;
	bool host_pi = in->protection_type && !o->act;
	size_t bs = in->lba_size, ms = in->metadata_size;
	void *buf = data, *md = NULL;

	e->md_vf = vf;
	e->md_lba = lba;
	e->md_blocks = blocks;
	e->md_extended = false;
	if (!vf_md_moves(vf, o)) {
		/* PRACT on PI-only metadata: the data alone. */
	} else if (in->metadata_extended) {
		size_t len = blocks * (bs + ms);
		buf = vf_md_buf(e, tq->c, len);
		if (!buf)
			return ENOMEM;
		e->md_extended = true;
		if (write) {
			char *dst = buf;
			const char *src = io_u->xfer_buf;
			for (uint32_t b = 0; b < blocks; b++) {
				memcpy(dst + b * (bs + ms), src + b * bs, bs);
				memset(dst + b * (bs + ms) + bs, 0, ms);
			}
			if (host_pi && vfnvme_pi_generate(in, buf, len, NULL, 0, lba, &pi)) {
				log_err("vfnvme: %s: generating PI: %s\n", io_u->file->file_name,
					vfnvme_last_error());
				return EIO;
			}
		}
	} else {
		size_t need = blocks * ms;
		size_t len = o->md_per_io_size ? o->md_per_io_size : (vt->max_bs / bs) * ms;
		if (len < need) {
			log_err("vfnvme: %s: md_per_io_size=%zu is too small for %u blocks of %zu B "
				"metadata\n", io_u->file->file_name, len, blocks, ms);
			return EINVAL;
		}
		md = vf_md_buf(e, tq->c, len);
		if (!md)
			return ENOMEM;
		if (write) {
			memset(md, 0, need);
			if (host_pi &&
			    vfnvme_pi_generate(in, data, blocks * bs, md, need, lba, &pi)) {
				log_err("vfnvme: %s: generating PI: %s\n", io_u->file->file_name,
					vfnvme_last_error());
				return EIO;
			}
		}
	}
	return write ? vfnvme_qpair_write_md(tq->qp, vf->nsid, buf, md, lba, blocks, &pi, NULL, e)
		     : vfnvme_qpair_read_md(tq->qp, vf->nsid, buf, md, lba, blocks, &pi, NULL, e);
}

int vf_md_complete(struct vf_iou *e, struct io_u *io_u, void *data)
{
	struct vf_file *vf = e->md_vf;
	const struct vf_md_opts *o = &e->vt->md;
	const struct vfnvme_ns_info *in = &vf->info;
	size_t bs = in->lba_size, ms = in->metadata_size;
	uint32_t blocks = e->md_blocks;
	if (io_u->ddir != DDIR_READ)
		return 0;
	if (in->protection_type && !o->act && o->check && vf_md_moves(vf, o)) {
		struct vfnvme_pi_opts pi = vf_md_pi(o);
		uint64_t bad = 0;
		uint16_t st = 0;
		int rc = e->md_extended
				 ? vfnvme_pi_verify(in, e->md_buf, blocks * (bs + ms), NULL, 0,
						    e->md_lba, &pi, &bad, &st)
				 : vfnvme_pi_verify(in, data, blocks * bs, e->md_buf, blocks * ms,
						    e->md_lba, &pi, &bad, &st);
		if (rc) {
			log_err("vfnvme: %s: read at LBA %llu: host PI check failed (status 0x%04x "
				"at LBA %llu): %s\n", io_u->file->file_name,
				(unsigned long long)e->md_lba, st, (unsigned long long)bad,
				vfnvme_last_error());
			return EIO;
		}
	}
	if (e->md_extended) {
		char *dst = io_u->xfer_buf;
		const char *src = e->md_buf;
		for (uint32_t b = 0; b < blocks; b++)
			memcpy(dst + b * bs, src + b * (bs + ms), bs);
	}
	return 0;
}
