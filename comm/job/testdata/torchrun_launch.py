"""torchrun, through torch.distributed.launcher.api (see comm/torchrun_test.go):

  torchrun_launch.py NPROC static|c10d PORT MAX_RESTARTS BINARY

Bookworm's torchrun (torch 1.13 on Python 3.11) cannot parse --redirects/--tee, so this
calls elastic_launch with them set to Std.NONE (torch 2.x has no such settings). torch
2.x built without libuv (Debian's) needs use_libuv=False on every TCPStore, the agent's
included.
"""
import os
import sys

import torch
import torch.distributed as dist

os.environ["USE_LIBUV"] = "0"
if torch.__version__.startswith("2."):
    _TCPStore = dist.TCPStore

    class _NoUV(_TCPStore):
        def __init__(self, *args, **kwargs):
            kwargs["use_libuv"] = False
            super().__init__(*args, **kwargs)

    import torch.distributed.rendezvous as _r
    import torch.distributed.elastic.rendezvous.c10d_rendezvous_backend as _c
    import torch.distributed.elastic.rendezvous.static_tcp_rendezvous as _s
    import torch.distributed.elastic.utils.distributed as _u

    for m in (dist, _r, _c, _s, _u):
        if hasattr(m, "TCPStore"):
            m.TCPStore = _NoUV
    _u.dist.TCPStore = _NoUV

from torch.distributed.launcher.api import LaunchConfig, elastic_launch

nproc, backend, port, restarts, binary = sys.argv[1:6]
kw = {}
if torch.__version__.startswith("1."):
    from torch.distributed.elastic.multiprocessing import Std

    kw = dict(redirects=Std.NONE, tee=Std.NONE)
cfg = LaunchConfig(
    min_nodes=1,
    max_nodes=1,
    nproc_per_node=int(nproc),
    run_id="ncclgo-test",
    rdzv_backend=backend,
    rdzv_endpoint="127.0.0.1:" + port,
    rdzv_configs={"rank": 0} if backend == "static" else {},
    max_restarts=int(restarts),
    monitor_interval=0.2,
    **kw,
)
elastic_launch(cfg, binary)()
print("LAUNCH OK", flush=True)
