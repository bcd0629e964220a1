// Package flightrec is a flight recorder for collective communication: every
// communicator keeps its last N operations in a ring (sequence numbers, operation,
// sizes, element type, state, timestamps, optionally the Go call site), and a rank
// writes them, when a job hangs, in the format of PyTorch's flight recorder, so that
// torch's own analyzer (python3 -m torch.distributed.flight_recorder.fr_trace DIR)
// reads Go ranks unchanged, next to PyTorch ranks. Analyze (and the command
// tools/commtrace) gives the same verdict without Python, for dumps of both.
//
// # Recording
//
// A process makes one Recorder (New, with its global rank) and registers each
// communicator with Comm; the backend then calls, on its own paths:
//
//   - Record when it enqueues an operation (RecordGroup for a group of them): the
//     operation takes the communicator's next sequence number, collectives and
//     point-to-point operations counted apart, as PyTorch counts them;
//   - Started and Completed (or CompletedThrough, for everything up to an id) when it
//     learns that an operation started or completed.
//
// Record takes the communicator's ring lock and allocates nothing; each communicator
// has its own ring lock, so communicators never contend. A backend can make its own
// enqueue lock the ring's (Group.Lock) and record while holding it: a record then
// takes no lock at all, and, once the recorder has more than one communicator, one
// atomic addition (the process-wide record id). The NCCL backend and the MPI
// communicator keep the recorder on by default with DefaultEntries entries per
// communicator; 0 in the environment or their option turns it off. Record reads no
// clock: a goroutine refreshes a cached time every Config.Resolution (10 ms), so
// timestamps are late by
// at most that. A nil *Recorder and a nil *Comm are off, and cost a nil check.
//
// # Configuration
//
// Config sets the ring size per communicator (0: off), where dumps go and whether
// call sites are recorded; ConfigFromEnv reads the environment, with PyTorch's names
// so that a job configured for torch configures Go ranks alike:
//
//	NCCLGO_FR_BUFFER_SIZE, TORCH_FR_BUFFER_SIZE, TORCH_NCCL_TRACE_BUFFER_SIZE
//	    entries kept per communicator (0 turns the recorder off)
//	NCCLGO_FR_DUMP_FILE, TORCH_FR_DUMP_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE
//	    the dump's path without the rank (default /tmp/nccl_trace_rank_)
//	NCCLGO_FR_CALL_SITES=1
//	    record each operation's Go call site (about 100 ns an operation)
//
// The first variable set in each line wins.
//
// # The dump
//
// Dump writes a pickle (protocol 2) of the dict torch 2.14 writes, version "2.10":
// version, pg_config (each communicator's name, description and global ranks),
// comm_lib_version, pg_status (last enqueued, started and completed collective of
// each communicator) and entries (record_id, pg_id, process_group, collective_seq_id,
// p2p_seq_id, op_id, profiling_name such as "nccl:all_reduce" or "nccl:send 0->1",
// time_created_ns, input/output sizes and dtypes, state, the discovery times of start
// and completion, retired, timeout_ms, is_p2p, frames). WriteFile writes it to
// <DumpFile><rank>.
//
// The package writes and reads pickle itself rather than through a library (such as
// github.com/kisielk/og-rek): a dump needs about twenty opcodes, the writer streams
// them straight from the rings (2,000 entries in about 10 ms), and the reader, which
// takes files from crashed jobs, bounds its work and memory by the input's size (a
// pickle whose memo shares one list many times is refused, not expanded). A
// dependency would add more surface than the code it saves.
//
// # The verdict
//
// Analyze returns one Verdict per communicator, the cause first. A rank missing from
// a collective because it is blocked in an earlier operation of another communicator
// is that communicator's victim (Verdict.Victims, Verdict.Victim): its verdict comes
// after the verdict whose missing rank has nothing earlier pending (a rank that
// skipped the operation). Which of two operations of two communicators is earlier is
// what the ranks' records say: most of the ranks that recorded both, else the
// operations one sequence number before each, and so on back. A mismatch whose calls
// were each made by as many ranks (two ranks, one call each) names no culprit: both
// calls are reported.
//
// # Known limits of torch 2.14's analyzer
//
// fr_trace reports each communicator's problem in the order of its records, without
// telling a victim from a cause, and in a mismatch between two ranks it blames one
// of them, as the order in which it lists the dump files (the directory's) falls.
//
// fr_trace accepts only the backend names nccl, ncclx, xccl, gloo, rccl, rcclx, mccl
// and hccl (Group.Backend), and cannot analyse torch 2.14's own gloo dumps: gloo
// records its groups in pg_config under an empty name. Analyze infers such a
// group's members from the entries and says so.
package flightrec
