/*
 * bounds.c: the C ABI lets the device touch only the buffer a data pointer is in. Reads that
 * run past the end of a buffer from vfnvme_dma_alloc, and reads into a buffer given back with
 * vfnvme_dma_free, must fail with VFNVME_ERR_BAD_BUFFER and leave the neighbouring buffer
 * alone; vfnvme_dma_free of a buffer with a read in flight must fail with VFNVME_ERR_BUSY.
 * Exits 0 when they do.
 *
 *   bounds --model            against the in-memory controller model
 *   bounds 0000:00:10.0 [ns]  against a controller bound to vfio-pci (reads only)
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

/* Reads `blocks` blocks at LBA 0 into `buf`; if accepted, waits for the completion. */
static int read_blocks(struct vfnvme_qpair *qp, uint32_t nsid, void *buf, uint32_t blocks)
{
	int rc = vfnvme_qpair_read(qp, nsid, buf, 0, blocks, NULL, NULL);
	while (vfnvme_qpair_outstanding(qp) > 0) {
		int n = vfnvme_qpair_process_completions(qp, 0);
		if (n < 0)
			return n;
	}
	return rc;
}

static int failures;

static void expect(const char *what, int got, int want)
{
	printf("%-52s %s (%d)\n", what, got == want ? "ok" : "WRONG", got);
	if (got != want) {
		fprintf(stderr, "%s: expected %d (%s), got %d (%s); last error: %s\n", what, want,
			vfnvme_strerror(want), got, vfnvme_strerror(got), vfnvme_last_error());
		failures++;
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s --model | PCI-ADDRESS [NSID]\n", argv[0]);
		return 2;
	}
	struct vfnvme_ctrl *ctrl = NULL;
	if (!strcmp(argv[1], "--model")) {
		struct vfnvme_model_opts mo = { .size = sizeof(mo), .namespaces = 1, .lba_size = 512,
						.blocks = 1024 };
		CHECK(vfnvme_ctrl_open_model(&mo, &ctrl));
	} else {
		CHECK(vfnvme_ctrl_open(argv[1], NULL, &ctrl));
	}
	struct vfnvme_ns_info ns;
	int count = vfnvme_ctrl_namespaces(ctrl, &ns, 1);
	CHECK(count);
	uint32_t nsid = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 0) : ns.nsid;
	struct vfnvme_ns_info info;
	CHECK(vfnvme_ctrl_namespace(ctrl, nsid, &info));
	uint32_t per_4k = 4096 / info.lba_size;
	if (per_4k == 0 || info.blocks < 128) {
		fprintf(stderr, "namespace %u: %u-byte blocks; this check needs <= 4096\n", nsid,
			info.lba_size);
		return 2;
	}

	void *a, *b;
	CHECK(vfnvme_dma_alloc(ctrl, 4096, &a, NULL));
	CHECK(vfnvme_dma_alloc(ctrl, 4096, &b, NULL));
	memset(b, 0xb5, 4096);
	struct vfnvme_qpair *qp;
	CHECK(vfnvme_qpair_alloc(ctrl, 8, &qp));

	char what[80];
	expect("read 4096 bytes into a 4096-byte buffer", read_blocks(qp, nsid, a, per_4k), 0);
	snprintf(what, sizeof what, "read %u x %u bytes into a 4096-byte buffer", per_4k + 1,
		 info.lba_size);
	expect(what, read_blocks(qp, nsid, a, per_4k + 1), VFNVME_ERR_BAD_BUFFER);
	expect("read 64 KiB into a 4096-byte buffer",
	       read_blocks(qp, nsid, a, (64 << 10) / info.lba_size), VFNVME_ERR_BAD_BUFFER);
	expect("write 4096 + 1 block from a 4096-byte buffer",
	       vfnvme_qpair_write(qp, nsid, a, 0, per_4k + 1, NULL, NULL), VFNVME_ERR_BAD_BUFFER);
	/* A buffer in flight can't be freed: the device may still write it. */
	CHECK(vfnvme_qpair_read(qp, nsid, a, 0, per_4k, NULL, NULL));
	CHECK(vfnvme_qpair_commit(qp));
	expect("free a buffer with a read in flight", vfnvme_dma_free(ctrl, a), VFNVME_ERR_BUSY);
	while (vfnvme_qpair_outstanding(qp) > 0)
		CHECK(vfnvme_qpair_process_completions(qp, 0));
	CHECK(vfnvme_dma_free(ctrl, a));
	expect("read into a freed buffer", read_blocks(qp, nsid, a, 1), VFNVME_ERR_BAD_BUFFER);
	uint64_t iova;
	expect("translate a freed buffer", vfnvme_dma_translate(ctrl, a, &iova),
	       VFNVME_ERR_BAD_BUFFER);
	expect("nothing was queued", (int)vfnvme_qpair_outstanding(qp), 0);
	for (int i = 0; i < 4096; i++) {
		if (((unsigned char *)b)[i] != 0xb5) {
			fprintf(stderr, "the neighbouring buffer changed at byte %d\n", i);
			failures++;
			break;
		}
	}

	CHECK(vfnvme_qpair_free(qp));
	CHECK(vfnvme_dma_free(ctrl, b));
	CHECK(vfnvme_ctrl_close(ctrl));
	if (failures) {
		fprintf(stderr, "bounds: %d check(s) failed\n", failures);
		return 1;
	}
	printf("bounds: OK\n");
	return 0;
}
