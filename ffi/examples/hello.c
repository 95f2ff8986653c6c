/*
 * hello.c: the smallest complete vfnvme program. Opens a controller, lists its namespaces,
 * writes one block, reads it back, verifies it and closes.
 *
 *   hello --model            against the in-memory controller model (no hardware needed)
 *   hello 0000:00:10.0 [ns]  against a controller bound to vfio-pci (the block at LBA 0 of
 *                            namespace ns, default the first, is overwritten!)
 *
 * Build: gcc -o hello hello.c -I ffi/include -L target/release -lvfnvme
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vfnvme.h"

static int done;

static void on_done(void *arg, const struct vfnvme_cpl *cpl)
{
	const char *what = arg;
	if (cpl->status || cpl->rc) {
		fprintf(stderr, "%s failed: sct %u sc 0x%02x rc %d\n", what, cpl->sct, cpl->sc, cpl->rc);
		exit(1);
	}
	done = 1;
}

/* Polls until the command submitted last has completed. */
static int wait_done(struct vfnvme_qpair *qp)
{
	done = 0;
	while (!done) {
		int n = vfnvme_qpair_process_completions(qp, 0);
		if (n < 0)
			return n;
	}
	return 0;
}

#define CHECK(call)                                                                           \
	do {                                                                                  \
		int rc_ = (call);                                                             \
		if (rc_ < 0) {                                                                \
			fprintf(stderr, "%s: %s (%s)\n", #call, vfnvme_strerror(rc_),         \
				vfnvme_last_error());                                         \
			return 1;                                                             \
		}                                                                             \
	} while (0)

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s --model | PCI-ADDRESS [NSID]\n", argv[0]);
		return 2;
	}
	struct vfnvme_ctrl *ctrl = NULL;
	if (!strcmp(argv[1], "--model")) {
		struct vfnvme_model_opts mo = { .size = sizeof(mo), .namespaces = 2, .lba_size = 4096,
						.blocks = 1024 };
		CHECK(vfnvme_ctrl_open_model(&mo, &ctrl));
	} else {
		CHECK(vfnvme_ctrl_open(argv[1], NULL, &ctrl));
	}

	struct vfnvme_ns_info ns[16];
	int count = vfnvme_ctrl_namespaces(ctrl, ns, 16);
	CHECK(count);
	printf("%d namespace(s)\n", count);
	for (int i = 0; i < count && i < 16; i++)
		printf("  nsid %u: %llu blocks of %u bytes\n", ns[i].nsid,
		       (unsigned long long)ns[i].blocks, ns[i].lba_size);
	if (count == 0) {
		fprintf(stderr, "no namespaces\n");
		return 1;
	}
	uint32_t nsid = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 0) : ns[0].nsid;
	struct vfnvme_ns_info info;
	CHECK(vfnvme_ctrl_namespace(ctrl, nsid, &info));

	void *wbuf, *rbuf;
	uint64_t iova;
	CHECK(vfnvme_dma_alloc(ctrl, info.lba_size, &wbuf, &iova));
	CHECK(vfnvme_dma_alloc(ctrl, info.lba_size, &rbuf, NULL));
	for (uint32_t i = 0; i < info.lba_size; i++)
		((unsigned char *)wbuf)[i] = (unsigned char)(i * 7 + 1);

	/* Plain host memory is refused. */
	char stack[4096];
	struct vfnvme_qpair *qp;
	CHECK(vfnvme_qpair_alloc(ctrl, 8, &qp));
	if (vfnvme_qpair_write(qp, nsid, stack, 0, 1, on_done, "bad") != VFNVME_ERR_BAD_BUFFER) {
		fprintf(stderr, "a stack buffer was accepted\n");
		return 1;
	}

	CHECK(vfnvme_qpair_write(qp, nsid, wbuf, 0, 1, on_done, "write"));
	CHECK(vfnvme_qpair_commit(qp));
	CHECK(wait_done(qp));
	CHECK(vfnvme_qpair_read(qp, nsid, rbuf, 0, 1, on_done, "read"));
	CHECK(vfnvme_qpair_commit(qp));
	CHECK(wait_done(qp));
	if (memcmp(wbuf, rbuf, info.lba_size)) {
		fprintf(stderr, "data mismatch: the block read back differs from the block written\n");
		return 1;
	}
	printf("wrote and read back 1 block of %u bytes on nsid %u (buffer iova 0x%llx): OK\n",
	       info.lba_size, nsid, (unsigned long long)iova);

	CHECK(vfnvme_qpair_free(qp));
	CHECK(vfnvme_dma_free(ctrl, wbuf));
	CHECK(vfnvme_dma_free(ctrl, rbuf));
	CHECK(vfnvme_ctrl_close(ctrl));
	return 0;
}
