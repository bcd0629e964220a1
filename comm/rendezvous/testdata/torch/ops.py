"""Calls every operation of torch's TCPStore client once and prints each answer, so that
a Go test can compare two servers op by op (see TestTorch214ClientAnswersLikeTorchServer).

  ops.py client HOST PORT   one line per operation: OP <name>\t<answer>, then DONE
  ops.py server             torch's own server (legacy backend); prints PORT <port>,
                            serves until stdin closes

Every TCPStore is made with use_libuv=False: Debian builds torch without libuv.
"""
import datetime
import hashlib
import os
import random
import sys
import threading

os.environ["USE_LIBUV"] = "0"
import torch.distributed as dist  # noqa: E402
from torch.distributed.distributed_c10d import _store_based_barrier  # noqa: E402

T = datetime.timedelta(seconds=60)
SHORT = datetime.timedelta(seconds=1)


def connect(host, port):
    return dist.TCPStore(host, port, is_master=False, use_libuv=False, timeout=T)


def rec(name, fn):
    try:
        answer = repr(fn())
    except Exception as e:  # the error is the answer
        answer = f"raised {type(e).__name__}: {e}"
    print(f"OP {name}\t{answer}", flush=True)


def digest(b):
    return f"{len(b)} bytes, sha256 {hashlib.sha256(b).hexdigest()[:16]}"


def in_thread(fn):
    out = {}

    def run():
        try:
            out["v"] = fn()
        except Exception as e:
            out["v"] = f"raised {type(e).__name__}: {e}"

    th = threading.Thread(target=run)
    th.start()
    return lambda: (th.join(), out.get("v"))[1]


def client(host, port):
    s = connect(host, port)
    other = connect(host, port)
    rec("set", lambda: s.set("a", "1"))
    rec("get", lambda: s.get("a"))
    rec("set overwrites", lambda: (s.set("a", "2"), s.get("a"))[1])
    rec("add to a missing key", lambda: s.add("n", 5))
    rec("add", lambda: s.add("n", -2))
    rec("get of a counter", lambda: s.get("n"))
    rec("compare_set, missing key, empty expected", lambda: s.compare_set("c1", "", "x"))
    rec("compare_set, missing key, expected given", lambda: s.compare_set("c2", "y", "z"))
    rec("check after compare_set of a missing key", lambda: s.check(["c2"]))
    rec("compare_set, wrong expected", lambda: s.compare_set("c1", "q", "w"))
    rec("compare_set, right expected", lambda: s.compare_set("c1", "x", "w"))
    rec("check, all present", lambda: s.check(["a", "n", "c1"]))
    rec("check, one absent", lambda: s.check(["a", "absent"]))
    rec("wait, present", lambda: s.wait(["a"]))
    rec("wait with timeout, present", lambda: s.wait(["a", "n"], T))
    late = in_thread(lambda: other.wait(["late"], T))
    rec("wait woken by another client's set", lambda: (s.set("late", "v"), late())[1])
    rec("wait with timeout, absent", lambda: s.wait(["never"], SHORT))
    rec("get after a timed-out wait", lambda: s.get("a"))
    rec("num_keys", lambda: s.num_keys())
    rec("delete_key", lambda: s.delete_key("c1"))
    rec("delete_key, missing", lambda: s.delete_key("c1"))
    rec("check after delete", lambda: s.check(["c1"]))
    rec("append to a missing key", lambda: (s.append("ap", "x"), s.get("ap"))[1])
    rec("append", lambda: (s.append("ap", "yz"), s.get("ap"))[1])
    rec("multi_set", lambda: s.multi_set(["m1", "m2"], ["v1", "v2"]))
    rec("multi_get", lambda: s.multi_get(["m1", "m2", "a"]))
    rec("has_extended_api", lambda: s.has_extended_api())
    rec("list_keys", lambda: sorted(s.list_keys()))
    big = random.Random(214).randbytes(4 << 20)
    rec("set of 4 MiB", lambda: s.set("big", big))
    rec("get of 4 MiB", lambda: digest(s.get("big")))
    rec("multi_get of 4 MiB", lambda: [digest(v) for v in s.multi_get(["big", "m1"])])
    p = dist.PrefixStore("/worker/attempt_0", s)
    rec("PrefixStore set, get", lambda: (p.set("pk", "pv"), p.get("pk"))[1])
    rec("PrefixStore add", lambda: p.add("pn", 3))
    rec("PrefixStore check", lambda: p.check(["pk", "pn"]))
    rec("PrefixStore compare_set", lambda: p.compare_set("pk", "pv", "pw"))
    rec("PrefixStore multi_get", lambda: p.multi_get(["pk", "pn"]))
    rec("PrefixStore delete_key", lambda: p.delete_key("pn"))
    rec("get of the prefixed key without the prefix", lambda: s.get("/worker/attempt_0/pk"))
    rec("list_keys with prefixed keys", lambda: sorted(s.list_keys()))
    rec("barrier of one", lambda: s.barrier("b1", 1, T))
    rec("counter of a barrier", lambda: s.get("b1"))
    second = in_thread(lambda: other.barrier("b2", 2, T))
    rec("barrier of two", lambda: (s.barrier("b2", 2, T), second())[1])
    rec("barrier key reused", lambda: s.barrier("b2", 2, SHORT))
    rec("barrier, timeout", lambda: s.barrier("b3", 2, SHORT))
    rec("get after a timed-out barrier", lambda: s.get("b3"))
    peer = in_thread(lambda: _store_based_barrier(1, other, "g", 2, T))
    rec("store-based barrier", lambda: (_store_based_barrier(0, s, "g", 2, T), peer())[1])
    rec("queue_push (the client refuses it without libuv)", lambda: s.queue_push("q", "v"))
    rec("queue_len (the client refuses it without libuv)", lambda: s.queue_len("q"))
    rec("queue_pop (the client refuses it without libuv)", lambda: s.queue_pop("q", False))
    rec("num_keys at the end", lambda: s.num_keys())
    rec("list_keys at the end", lambda: sorted(s.list_keys()))
    rec("get of a missing key with timeout", lambda: (s.set_timeout(SHORT), s.get("missing"))[1])
    print("DONE", flush=True)


def server():
    s = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True, wait_for_workers=False,
                      use_libuv=False, timeout=T)
    print("PORT", s.port, flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    if sys.argv[1] == "client":
        client(sys.argv[2], int(sys.argv[3]))
    else:
        server()
