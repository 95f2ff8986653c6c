/*
 * version.c: a program that needs only the product library (no controller model, no device).
 * Prints the library's version and what opening a controller that does not exist gives: the
 * options refused without their size, then a typed error; then the machine's NVMe
 * controllers (vfnvme_enumerate). ffi/check-install.sh builds it
 * against the installed library, linked dynamically and statically.
 *
 *   version [PCI-ADDRESS]    default 0000:ff:1f.7 (no such device is expected there)
 *
 * Build: cc -o version version.c $(pkg-config --cflags --libs vfnvme)
 * Exits 0 when every answer is the expected one.
 */
#include <stdint.h>
#include <stdio.h>

#include "vfnvme.h"

int main(int argc, char **argv)
{
	const char *addr = argc > 1 ? argv[1] : "0000:ff:1f.7";
	uint32_t major = 0, minor = 0, patch = 0;
	if (vfnvme_version_info(&major, &minor, &patch) != VFNVME_OK)
		return 1;
	printf("libvfnvme %s (%u.%u.%u)\n", vfnvme_version(), major, minor, patch);

	struct vfnvme_ctrl *ctrl = NULL;
	struct vfnvme_ctrl_opts unsized = { .io_queues = 1 };
	int rc = vfnvme_ctrl_open(addr, &unsized, &ctrl);
	printf("options without size: %s\n", vfnvme_strerror(rc));
	if (rc != VFNVME_ERR_INVALID_ARGUMENT || ctrl)
		return 1;

	struct vfnvme_ctrl_opts opts = { .size = sizeof(opts), .io_queues = 1 };
	rc = vfnvme_ctrl_open(addr, &opts, &ctrl);
	printf("open %s: %s\n", addr, vfnvme_strerror(rc));
	if (rc >= 0 || ctrl) {
		vfnvme_ctrl_close(ctrl);
		return 1;
	}

	/* The machine's NVMe controllers (none on a host without PCI NVMe devices). */
	struct vfnvme_pci_device devs[16];
	int n = vfnvme_enumerate(devs, 16);
	if (n < 0) {
		printf("enumerate: %s\n", vfnvme_last_error());
		return 1;
	}
	printf("NVMe controllers: %d\n", n);
	for (int i = 0; i < n && i < 16; i++)
		printf("  %s %04x:%04x %s%s\n", (const char *)devs[i].address, devs[i].vendor,
		       devs[i].device, (const char *)devs[i].driver, devs[i].vfio ? " (vfio)" : "");
	if (vfnvme_enumerate(NULL, 4) != VFNVME_ERR_INVALID_ARGUMENT)
		return 1;
	return 0;
}
