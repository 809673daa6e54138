/* comm.h - the processes of a data-parallel run (mpirun -np N nnc model.nn), over MPI.
 *
 * A process started by an MPI launcher joins the job here; one started any other way runs
 * alone (comm_init returns NULL and nothing below is called).  The Comm gives the compiled
 * step its collectives (nnc_comm, nnc_abi.h: gradients summed in buckets with non-blocking
 * allreduces) and the trainer its control messages (the step's loss and whether to stop, the
 * parameters' checksum at the start), so that every process takes every decision together and
 * none waits forever for another. */
#ifndef NNC_COMM_H
#define NNC_COMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../include/nnc_abi.h"

typedef struct Comm Comm;

/* Joins the job.  NULL with err filled when launched by MPI but this nnc was built without it,
 * or when MPI fails to start; NULL with err empty when not launched by a launcher. */
Comm *comm_init(int *argc, char ***argv, char *err, size_t n);
/* "Open MPI v4.1.4 ..." for --version, or NULL when built without MPI. */
const char *comm_library(void);
/* One process trained as one of a data-parallel job (--data-parallel without mpirun): the same
 * compiled step with its collectives, which sum one value; no MPI needed. */
Comm *comm_solo(void);
int comm_rank(const Comm *c);
int comm_size(const Comm *c);
int comm_local_rank(const Comm *c);   /* this process among them (its GPU) */
/* The cores this process may use (its affinity) over the processes on its machine, at least 1. */
int comm_threads(const Comm *c);

/* The collectives the step calls (pass to nnc_model_abi.set_comm).  Before each step the trainer
 * sets this process's share of the global batch: its rows over all rows. */
const nnc_comm *comm_abi(Comm *c);
void comm_set_weight(Comm *c, double share);
/* Whether a GPU target may sum gradients with NCCL (torch's backend="nccl", the default) or
 * must go through the host's MPI (backend="mpi"). */
void comm_allow_device_sums(Comm *c, bool allow);
/* Seconds spent in the step's collectives since the last call (the bench reports it). */
double comm_take_seconds(Comm *c);

/* Blocking control messages, in the same order on every process. */
bool comm_sum(Comm *c, double *v, int n);                       /* in place, over processes */
bool comm_agree_u64(Comm *c, uint64_t v, uint64_t *lo, uint64_t *hi);   /* min and max of v */
bool comm_bcast_int(Comm *c, int *v);                           /* process 0's value to all */

/* The run is stopping with every process knowing it (a stop signal, a NaN loss: decisions
 * taken over comm_sum), so no process is left waiting in a collective. */
void comm_mark_agreed(Comm *c);
/* Leaves the job: a clean finish when rc is 0, on one process, or after comm_mark_agreed;
 * otherwise every process is stopped (MPI_Abort), since the others may be waiting in a
 * collective this one left. */
void comm_finish(Comm *c, int rc);
#endif
