// busyloop is the C reference of BenchmarkMPIBusyLoop and TestMPIBusyLoopDoesNotStarve:
// the loop their Go ranks run (a barrier, a ring exchange with both neighbours, an
// all-reduce, a broadcast and an all-gather), calling MPI directly while busy pthreads
// spin on every rank. Usage: busyloop BUSY PHASES ITERATIONS. For each phase it starts
// BUSY spinning threads, runs ITERATIONS loops and prints one line per operation with
// the nanoseconds spent in it over the phase:
//
//	busyloop rank R phase P op NAME ns N
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { COUNT = 1024, OPS = 6, SETTLE_US = 50000 };
static const char *names[OPS] = {"barrier", "ring", "allreduce", "broadcast", "allgather", "loop"};
static atomic_int stop;

static void *spin(void *arg) {
	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
	}
	return NULL;
}

static long long now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
	int provided, rank, n;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (argc != 4) {
		fprintf(stderr, "usage: busyloop BUSY PHASES ITERATIONS\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int busy = atoi(argv[1]), phases = atoi(argv[2]), iterations = atoi(argv[3]);
	float *buf = calloc(COUNT, sizeof(float)), *out = calloc((size_t)COUNT * n, sizeof(float));
	float *left = calloc(COUNT, sizeof(float)), *right = calloc(COUNT, sizeof(float));
	pthread_t *threads = calloc(busy > 0 ? busy : 1, sizeof(pthread_t));
	int l = (rank + n - 1) % n, r = (rank + 1) % n;
	for (int p = 0; p < phases; p++) {
		long long ns[OPS] = {0};
		atomic_store(&stop, 0);
		for (int i = 0; i < busy; i++) pthread_create(&threads[i], NULL, spin, NULL);
		usleep(SETTLE_US); // the busy threads take their turns before the loop
		MPI_Barrier(MPI_COMM_WORLD);
		for (int it = 0; it < iterations; it++) {
			long long t0 = now(), t;
			MPI_Barrier(MPI_COMM_WORLD);
			t = now(), ns[0] += t - t0, t0 = t;
			MPI_Request req[4];
			MPI_Isend(buf, COUNT, MPI_FLOAT, r, 1, MPI_COMM_WORLD, &req[0]);
			MPI_Isend(buf, COUNT, MPI_FLOAT, l, 2, MPI_COMM_WORLD, &req[1]);
			MPI_Irecv(left, COUNT, MPI_FLOAT, l, 1, MPI_COMM_WORLD, &req[2]);
			MPI_Irecv(right, COUNT, MPI_FLOAT, r, 2, MPI_COMM_WORLD, &req[3]);
			MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
			t = now(), ns[1] += t - t0, t0 = t;
			MPI_Allreduce(MPI_IN_PLACE, buf, COUNT, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			t = now(), ns[2] += t - t0, t0 = t;
			MPI_Bcast(buf, COUNT, MPI_FLOAT, 0, MPI_COMM_WORLD);
			t = now(), ns[3] += t - t0, t0 = t;
			MPI_Allgather(buf, COUNT, MPI_FLOAT, out, COUNT, MPI_FLOAT, MPI_COMM_WORLD);
			t = now(), ns[4] += t - t0, t0 = t;
		}
		for (int i = 0; i < 5; i++) ns[5] += ns[i];
		atomic_store(&stop, 1);
		for (int i = 0; i < busy; i++) pthread_join(threads[i], NULL);
		for (int i = 0; i < OPS; i++) printf("busyloop rank %d phase %d op %s ns %lld\n", rank, p, names[i], ns[i]);
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}
