// nccl.c: the emulated NCCL (libnccl.so.2): a communicator is a duplicate of
// MPI_COMM_WORLD, and an all-reduce is MPI_Allreduce, run at once.
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <mpi.h>

#include "emu.h"

typedef int ncclResult_t;
enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
};
enum {
	ncclInt8 = 0,
	ncclUint8 = 1,
	ncclInt32 = 2,
	ncclUint32 = 3,
	ncclInt64 = 4,
	ncclUint64 = 5,
	ncclFloat16 = 6,
	ncclFloat32 = 7,
	ncclFloat64 = 8,
	ncclBfloat16 = 9,
};
enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

#define ID_BYTES 128
typedef struct {
	char internal[ID_BYTES];
} ncclUniqueId;

static const char id_magic[16] = "cudaemu-nccl-id";

#define COMM_MAGIC 0x4e43434cU

struct comm {
	uint32_t magic;
	MPI_Comm mpi;
	int nranks, rank;
	int aborted;   // read and written with __atomic builtins
	int async_err; // likewise
};
typedef struct comm *ncclComm_t;

static const char *const result_strings[] = {
	"no error",
	"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
	"unhandled system error (run with NCCL_DEBUG=INFO for details)",
	"internal error - please report this issue to the NCCL developers",
	"invalid argument (run with NCCL_DEBUG=WARN for details)",
	"invalid usage (run with NCCL_DEBUG=WARN for details)",
	"remote process exited or there was a network error",
	"NCCL operation in progress",
};

static long allreduce_calls; // for HPCTRAIN_CUDAEMU_NCCL_FAIL_AT

EMU_EXPORT const char *ncclGetErrorString(ncclResult_t r) {
	if (r >= 0 && (size_t)r < sizeof result_strings / sizeof result_strings[0])
		return result_strings[r];
	return "unknown result code";
}

EMU_EXPORT ncclResult_t ncclGetVersion(int *version) {
	if (!version)
		return ncclInvalidArgument;
	*version = 21803; // 2.18.3
	return ncclSuccess;
}

EMU_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
	if (!id)
		return ncclInvalidArgument;
	memcpy(id->internal, id_magic, sizeof id_magic);
	size_t n = ID_BYTES - sizeof id_magic, got = 0;
	while (got < n) {
		ssize_t r = getrandom(id->internal + sizeof id_magic + got, n - got, 0);
		if (r <= 0)
			return ncclSystemError;
		got += (size_t)r;
	}
	return ncclSuccess;
}

static void finalize_mpi(void) {
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin)
		MPI_Finalize();
}

static ncclResult_t ensure_mpi(void) {
	int init = 0, fin = 0;
	MPI_Initialized(&init);
	MPI_Finalized(&fin);
	if (fin) {
		fprintf(stderr, "cudaemu: NCCL: MPI is already finalized\n");
		return ncclSystemError;
	}
	if (init)
		return ncclSuccess;
	int provided;
	if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
		return ncclSystemError;
	atexit(finalize_mpi);
	return ncclSuccess;
}

// What each rank contributes to the check of ncclCommInitRank's arguments.
struct init_info {
	char id[ID_BYTES];
	int nranks, rank;
};

EMU_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
	if (!out)
		return ncclInvalidArgument;
	if (nranks < 1 || rank < 0 || rank >= nranks) {
		fprintf(stderr, "cudaemu: ncclCommInitRank: rank %d of %d ranks is invalid\n", rank, nranks);
		return ncclInvalidArgument;
	}
	if (memcmp(id.internal, id_magic, sizeof id_magic) != 0) {
		fprintf(stderr, "cudaemu: ncclCommInitRank: the unique id does not come from ncclGetUniqueId\n");
		return ncclInvalidArgument;
	}
	ncclResult_t r = ensure_mpi();
	if (r)
		return r;
	MPI_Comm mpi;
	if (MPI_Comm_dup(MPI_COMM_WORLD, &mpi) != MPI_SUCCESS)
		return ncclSystemError;
	MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
	int size, me;
	MPI_Comm_size(mpi, &size);
	MPI_Comm_rank(mpi, &me);
	struct init_info mine, *all = malloc((size_t)size * sizeof *all);
	if (!all) {
		MPI_Comm_free(&mpi);
		return ncclSystemError;
	}
	memcpy(mine.id, id.internal, ID_BYTES);
	mine.nranks = nranks;
	mine.rank = rank;
	// Every rank sees every rank's arguments, so all reach the same verdict.
	if (MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, mpi) != MPI_SUCCESS) {
		free(all);
		MPI_Comm_free(&mpi);
		return ncclSystemError;
	}
	for (int i = 0; i < size && r == ncclSuccess; i++) {
		if (all[i].nranks != size || all[i].rank != i) {
			if (i == me)
				fprintf(stderr,
				        "cudaemu: ncclCommInitRank: rank %d of %d ranks, but this is MPI rank %d of %d "
				        "(the emulator's communicator is MPI_COMM_WORLD)\n",
				        rank, nranks, me, size);
			r = ncclInvalidUsage;
		} else if (memcmp(all[i].id, all[0].id, ID_BYTES) != 0) {
			if (me == 0 || i == me)
				fprintf(stderr,
				        "cudaemu: ncclCommInitRank: rank %d's unique id differs from rank 0's "
				        "(was the id broadcast?)\n",
				        i);
			r = ncclInvalidUsage;
		}
	}
	free(all);
	if (r) {
		MPI_Comm_free(&mpi);
		return r;
	}
	struct comm *c = calloc(1, sizeof *c);
	if (!c) {
		MPI_Comm_free(&mpi);
		return ncclSystemError;
	}
	c->magic = COMM_MAGIC;
	c->mpi = mpi;
	c->nranks = nranks;
	c->rank = rank;
	*out = c;
	return ncclSuccess;
}

static int fail_now(int rank) {
	const char *at = getenv("HPCTRAIN_CUDAEMU_NCCL_FAIL_AT");
	if (!at || !*at)
		return 0;
	const char *on = getenv("HPCTRAIN_CUDAEMU_NCCL_FAIL_RANK");
	if (on && *on && atoi(on) != rank)
		return 0;
	return __atomic_add_fetch(&allreduce_calls, 1, __ATOMIC_SEQ_CST) == atol(at);
}

static int valid(ncclComm_t c) { return c && c->magic == COMM_MAGIC; }

EMU_EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int type, int op,
                                      ncclComm_t c, void *stream) {
	(void)stream; // the operation runs at once
	if (!valid(c))
		return ncclInvalidArgument;
	if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) {
		fprintf(stderr, "cudaemu: ncclAllReduce: the communicator was aborted\n");
		return ncclInvalidUsage;
	}
	MPI_Datatype dt;
	size_t size;
	switch (type) {
	case ncclInt8: dt = MPI_INT8_T; size = 1; break;
	case ncclUint8: dt = MPI_UINT8_T; size = 1; break;
	case ncclInt32: dt = MPI_INT32_T; size = 4; break;
	case ncclUint32: dt = MPI_UINT32_T; size = 4; break;
	case ncclInt64: dt = MPI_INT64_T; size = 8; break;
	case ncclUint64: dt = MPI_UINT64_T; size = 8; break;
	case ncclFloat32: dt = MPI_FLOAT; size = 4; break;
	case ncclFloat64: dt = MPI_DOUBLE; size = 8; break;
	default:
		fprintf(stderr, "cudaemu: ncclAllReduce: data type %d is not supported by the emulator\n", type);
		return ncclInvalidArgument;
	}
	MPI_Op mop;
	switch (op) {
	case ncclSum:
	case ncclAvg: mop = MPI_SUM; break;
	case ncclProd: mop = MPI_PROD; break;
	case ncclMax: mop = MPI_MAX; break;
	case ncclMin: mop = MPI_MIN; break;
	default: return ncclInvalidArgument;
	}
	if (count == 0)
		return ncclSuccess;
	if (count > SIZE_MAX / size)
		return ncclInvalidArgument;
	size_t bytes = count * size;
	if (!cudaemu_check_range("ncclAllReduce send", (uint64_t)(uintptr_t)send, bytes) ||
	    !cudaemu_check_range("ncclAllReduce recv", (uint64_t)(uintptr_t)recv, bytes))
		return ncclInvalidArgument;
	const char *s = send;
	char *d = recv;
	if (s != d && s < d + bytes && d < s + bytes) {
		fprintf(stderr, "cudaemu: ncclAllReduce: send and receive buffers overlap without being equal\n");
		return ncclInvalidArgument;
	}
	if (fail_now(c->rank)) {
		fprintf(stderr, "cudaemu: ncclAllReduce: failing as HPCTRAIN_CUDAEMU_NCCL_FAIL_AT asks\n");
		__atomic_store_n(&c->async_err, ncclSystemError, __ATOMIC_SEQ_CST);
		return ncclSystemError;
	}
	const size_t chunk = (size_t)1 << 30; // MPI counts are int
	for (size_t off = 0; off < count; off += chunk) {
		size_t n = count - off < chunk ? count - off : chunk;
		const void *sb = s == d ? MPI_IN_PLACE : s + off * size;
		if (MPI_Allreduce(sb, d + off * size, (int)n, dt, mop, c->mpi) != MPI_SUCCESS) {
			__atomic_store_n(&c->async_err, ncclSystemError, __ATOMIC_SEQ_CST);
			return ncclSystemError;
		}
	}
	if (op == ncclAvg) {
		for (size_t i = 0; i < count; i++) {
			switch (type) {
			case ncclInt8: ((int8_t *)d)[i] /= c->nranks; break;
			case ncclUint8: ((uint8_t *)d)[i] /= c->nranks; break;
			case ncclInt32: ((int32_t *)d)[i] /= c->nranks; break;
			case ncclUint32: ((uint32_t *)d)[i] /= c->nranks; break;
			case ncclInt64: ((int64_t *)d)[i] /= c->nranks; break;
			case ncclUint64: ((uint64_t *)d)[i] /= c->nranks; break;
			case ncclFloat32: ((float *)d)[i] /= c->nranks; break;
			case ncclFloat64: ((double *)d)[i] /= c->nranks; break;
			}
		}
	}
	if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
		return ncclSystemError; // aborted while it ran
	return ncclSuccess;
}

// ncclCommAbort only marks the communicator: an MPI call in progress cannot
// be interrupted, and the memory stays valid for a call still blocked in
// one. It never blocks, so another thread may call it at any time.
EMU_EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) {
	if (!valid(c))
		return ncclInvalidArgument;
	__atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&c->async_err, ncclSystemError, __ATOMIC_SEQ_CST);
	return ncclSuccess;
}

EMU_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
	if (!valid(c) || !err)
		return ncclInvalidArgument;
	*err = __atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST);
	return ncclSuccess;
}

// ncclCommDestroy frees the MPI communicator, unless the communicator was
// aborted (a blocked call may still use it; the few bytes are left).
EMU_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) {
	if (!valid(c))
		return ncclInvalidArgument;
	if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
		return ncclSuccess;
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin)
		MPI_Comm_free(&c->mpi);
	c->magic = 0;
	free(c);
	return ncclSuccess;
}
