/*
 * iovec.c: vectored I/O through the C ABI. Writes blocks from iovecs of 2 to 16 pieces at odd
 * addresses and sizes spread over three buffers (vfnvme_qpair_writev), reads them back through
 * another split (vfnvme_qpair_readv) and with one plain read, and compares every byte; once
 * with vfnvme_qpair_opts.prefer_sgl off (SGLs only because PRPs can't describe these lists) and
 * once on. Checks that vfnvme_dma_free refuses a piece's buffer while its request is in flight,
 * and, on a model without SGL support, that such a list is refused with
 * VFNVME_ERR_NOT_PRP_DESCRIBABLE while a page-aligned one works. Exits 0 when all hold.
 *
 *   iovec --model            against the in-memory controller model
 *   iovec 0000:00:10.0 [ns]  against a controller bound to vfio-pci (writes blocks 4096..4600
 *                            of namespace ns, default the first!)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vfnvme.h"

#define CHECK(call)                                                                           \
	do {                                                                                  \
		int rc_ = (call);                                                             \
		if (rc_ < 0) {                                                                \
			fprintf(stderr, "%s: %s (%s)\n", #call, vfnvme_strerror(rc_),         \
				vfnvme_last_error());                                         \
			return 1;                                                             \
		}                                                                             \
	} while (0)

#define FAIL(...)                                                                             \
	do {                                                                                  \
		fprintf(stderr, __VA_ARGS__);                                                 \
		return 1;                                                                     \
	} while (0)

#define BUF (256 * 1024)
#define FIRST_LBA 4096

static int failed_cpl;

static void on_done(void *arg, const struct vfnvme_cpl *cpl)
{
	(void)arg;
	if (cpl->status || cpl->rc) {
		fprintf(stderr, "I/O failed: sct %u sc 0x%02x rc %d\n", cpl->sct, cpl->sc, cpl->rc);
		failed_cpl = 1;
	}
}

/* Polls until nothing is in flight. */
static int drain(struct vfnvme_qpair *qp)
{
	while (vfnvme_qpair_outstanding(qp) > 0) {
		int n = vfnvme_qpair_process_completions(qp, 0);
		if (n < 0)
			return n;
	}
	return failed_cpl ? -1 : 0;
}

/* `n` pieces of odd lengths holding `total` bytes, dealt round-robin over `bufs`, each at an
 * odd offset from `skew`. */
static void odd_layout(struct vfnvme_iov *iov, unsigned n, size_t total, size_t skew,
		       unsigned char *bufs[3])
{
	size_t next[3] = { skew | 1, skew | 1, skew | 1 };
	size_t left = total;
	for (unsigned k = 0; k < n; k++) {
		size_t len = k + 1 == n ? left : (left / (n - k)) | 1;
		iov[k].base = bufs[k % 3] + next[k % 3];
		iov[k].len = len;
		next[k % 3] += len + 3 + 2 * k;
		left -= len;
	}
}

/* The bytes of `iov` in order, into `out`. */
static void gather(const struct vfnvme_iov *iov, unsigned n, unsigned char *out)
{
	for (unsigned k = 0; k < n; k++) {
		memcpy(out, iov[k].base, iov[k].len);
		out += iov[k].len;
	}
}

/* Round trips through iovecs of 2..16 pieces on a queue pair with `prefer_sgl`. */
static int round_trips(struct vfnvme_ctrl *ctrl, uint32_t nsid, uint32_t lba_size, bool prefer_sgl)
{
	struct vfnvme_qpair_opts qo = { .size = sizeof(qo), .depth = 16, .prefer_sgl = prefer_sgl };
	struct vfnvme_qpair *qp;
	CHECK(vfnvme_qpair_alloc_opts(ctrl, &qo, &qp));
	if (vfnvme_qpair_uses_sgl(qp) != (int)prefer_sgl)
		FAIL("prefer_sgl %d: vfnvme_qpair_uses_sgl says %d\n", prefer_sgl,
		     vfnvme_qpair_uses_sgl(qp));
	unsigned char *src[3], *dst[3], *plain;
	for (int b = 0; b < 3; b++) {
		CHECK(vfnvme_dma_alloc(ctrl, BUF, (void **)&src[b], NULL));
		CHECK(vfnvme_dma_alloc(ctrl, BUF, (void **)&dst[b], NULL));
		for (size_t i = 0; i < BUF; i++)
			src[b][i] = (unsigned char)(i * 13 + b * 101 + prefer_sgl * 7 + 1);
		memset(dst[b], 0xa5, BUF);
	}
	CHECK(vfnvme_dma_alloc(ctrl, BUF, (void **)&plain, NULL));
	unsigned char *sent = malloc(BUF), *got = malloc(BUF);
	if (!sent || !got)
		FAIL("out of memory\n");
	static const unsigned counts[] = { 2, 3, 5, 8, 13, 16 };
	uint64_t lba = FIRST_LBA;
	for (unsigned t = 0; t < sizeof(counts) / sizeof(counts[0]); t++) {
		unsigned n = counts[t], back_n = n > 3 ? n - 1 : 2;
		uint32_t blocks = (uint32_t)(64 * 1024 / lba_size) / (16 / n + 1) + 1;
		size_t total = (size_t)blocks * lba_size;
		struct vfnvme_iov out[16], back[16];
		odd_layout(out, n, total, 7 * n, src);
		odd_layout(back, back_n, total, 5 + n, dst);
		CHECK(vfnvme_qpair_writev(qp, nsid, out, n, lba, blocks, on_done, NULL));
		/* A piece's buffer is in flight: its free is refused. */
		if (vfnvme_dma_free(ctrl, src[(n - 1) % 3]) != VFNVME_ERR_BUSY)
			FAIL("a piece's buffer was freed while its write was in flight\n");
		CHECK(drain(qp));
		CHECK(vfnvme_qpair_readv(qp, nsid, back, back_n, lba, blocks, on_done, NULL));
		CHECK(drain(qp));
		CHECK(vfnvme_qpair_read(qp, nsid, plain, lba, blocks, on_done, NULL));
		CHECK(drain(qp));
		gather(out, n, sent);
		gather(back, back_n, got);
		if (memcmp(sent, got, total) || memcmp(sent, plain, total))
			FAIL("%u pieces, %u blocks, prefer_sgl %d: data differs\n", n, blocks,
			     prefer_sgl);
		lba += blocks;
	}
	printf("prefer_sgl %d: iovecs of 2..16 odd pieces read back exactly\n", prefer_sgl);
	free(sent);
	free(got);
	CHECK(vfnvme_qpair_free(qp));
	for (int b = 0; b < 3; b++) {
		CHECK(vfnvme_dma_free(ctrl, src[b]));
		CHECK(vfnvme_dma_free(ctrl, dst[b]));
	}
	CHECK(vfnvme_dma_free(ctrl, plain));
	return 0;
}

/* On a model without SGLs: a list PRPs can't describe is refused, a page-aligned one works. */
static int without_sgls(void)
{
	struct vfnvme_model_opts mo = { .size = sizeof(mo), .lba_size = 512, .no_sgl = true };
	struct vfnvme_ctrl *ctrl;
	struct vfnvme_qpair *qp;
	unsigned char *buf;
	CHECK(vfnvme_ctrl_open_model(&mo, &ctrl));
	CHECK(vfnvme_qpair_alloc(ctrl, 8, &qp));
	CHECK(vfnvme_dma_alloc(ctrl, 4 * 4096, (void **)&buf, NULL));
	struct vfnvme_iov odd[2] = { { buf + 1, 700 }, { buf + 4096 + 9, 324 } };
	int rc = vfnvme_qpair_writev(qp, 1, odd, 2, 0, 2, on_done, NULL);
	if (rc != VFNVME_ERR_NOT_PRP_DESCRIBABLE)
		FAIL("without SGLs an odd list gave %d, not VFNVME_ERR_NOT_PRP_DESCRIBABLE\n", rc);
	printf("without SGLs: refused as expected: %s\n", vfnvme_last_error());
	struct vfnvme_iov aligned[2] = { { buf, 4096 }, { buf + 8192, 512 } };
	CHECK(vfnvme_qpair_writev(qp, 1, aligned, 2, 0, 9, on_done, NULL));
	CHECK(drain(qp));
	CHECK(vfnvme_qpair_free(qp));
	CHECK(vfnvme_dma_free(ctrl, buf));
	CHECK(vfnvme_ctrl_close(ctrl));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s --model | PCI-ADDRESS [NSID]\n", argv[0]);
		return 2;
	}
	int model = !strcmp(argv[1], "--model");
	struct vfnvme_ctrl *ctrl = NULL;
	if (model) {
		struct vfnvme_model_opts mo = { .size = sizeof(mo), .lba_size = 512,
						.blocks = 65536 };
		CHECK(vfnvme_ctrl_open_model(&mo, &ctrl));
	} else {
		CHECK(vfnvme_ctrl_open(argv[1], NULL, &ctrl));
	}
	struct vfnvme_ns_info ns[1];
	if (vfnvme_ctrl_namespaces(ctrl, ns, 1) < 1)
		FAIL("no namespaces\n");
	uint32_t nsid = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 0) : ns[0].nsid;
	struct vfnvme_ns_info info;
	CHECK(vfnvme_ctrl_namespace(ctrl, nsid, &info));
	if (info.blocks < FIRST_LBA + 1024)
		FAIL("namespace %u has only %llu blocks\n", nsid, (unsigned long long)info.blocks);
	for (int prefer = 0; prefer <= 1; prefer++)
		if (round_trips(ctrl, nsid, info.lba_size, prefer))
			return 1;
	CHECK(vfnvme_ctrl_close(ctrl));
	if (without_sgls())
		return 1;
	printf("iovec: OK\n");
	return 0;
}
