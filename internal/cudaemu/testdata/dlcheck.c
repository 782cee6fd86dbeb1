// dlcheck LIB SYMBOL...: dlopen LIB by name (as the Go binding does, so
// through LD_LIBRARY_PATH) and look up every SYMBOL; prints "ok" or what is
// missing.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: dlcheck LIB SYMBOL...\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf("FAIL dlopen: %s\n", dlerror());
		return 1;
	}
	int missing = 0;
	for (int i = 2; i < argc; i++)
		if (!dlsym(h, argv[i])) {
			printf("FAIL %s has no symbol %s\n", argv[1], argv[i]);
			missing++;
		}
	Dl_info info;
	if (argc > 2 && dladdr(dlsym(h, argv[2]), &info))
		printf("loaded %s\n", info.dli_fname);
	if (missing)
		return 1;
	printf("ok\n");
	return 0;
}
