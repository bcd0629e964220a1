"""Two torch ranks on the CPU process group (gloo) with the flight recorder on, each
writing its dump to OUT<rank>: python3 gloo_fr.py OUT STORE_FILE"""
import multiprocessing
import os
import sys

os.environ["TORCH_FR_BUFFER_SIZE"] = "100"
os.environ["USE_LIBUV"] = "0"  # Debian's torch has no libuv

import torch
import torch.distributed as dist


def worker(rank, out, store_file):
    store = dist.FileStore(store_file, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    g = dist.new_group([0, 1])
    dist.all_reduce(t, group=g)
    dist.barrier()
    with open(out + str(rank), "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace())
    dist.destroy_process_group()


if __name__ == "__main__":
    out, store_file = sys.argv[1], sys.argv[2]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=worker, args=(r, out, store_file)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    codes = [p.exitcode for p in procs]
    if codes != [0, 0]:
        sys.exit("ranks exited with %s" % codes)
    print("OK", torch.__version__)
