"""Drives torch.distributed.TCPStore against a Go peer (see tcpstore_torch_test.go).

  store.py client HOST PORT   torch client against ncclgo's server
  store.py server             torch's own server; prints its port, serves until Go is done
"""
import datetime
import sys

import torch.distributed as dist

T = datetime.timedelta(seconds=60)


def store(host, port, master):
    kw = dict(is_master=master, timeout=T)
    if master:
        kw["world_size"] = 1
        kw["wait_for_workers"] = False
    try:
        return dist.TCPStore(host, port, use_libuv=False, **kw)
    except TypeError:  # torch 1.x has no use_libuv
        return dist.TCPStore(host, port, **kw)


def expect(what, got, want):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}", flush=True)
        sys.exit(1)


def client(host, port):
    s = store(host, port, False)
    expect("get of a key Go set", s.get("from-go"), b"hello from go")
    s.set("py/a", "1")
    expect("get", s.get("py/a"), b"1")
    expect("add", s.add("py/n", 5), 5)
    expect("add again", s.add("py/n", 2), 7)
    expect("compare_set on an absent key", s.compare_set("py/c", "", "x"), b"x")
    expect("compare_set, wrong expected", s.compare_set("py/c", "y", "z"), b"x")
    expect("compare_set, right expected", s.compare_set("py/c", "x", "z"), b"z")
    if hasattr(s, "check"):  # torch >= 2 exposes CHECK to Python
        expect("check present", s.check(["py/a", "py/n"]), True)
        expect("check absent", s.check(["py/a", "py/nothing"]), False)
    expect("delete_key", s.delete_key("py/c"), True)
    expect("delete_key again", s.delete_key("py/c"), False)
    s.set("py/waiting", "1")
    s.wait(["go/late"])  # Go sets it after it saw py/waiting
    expect("get after wait", s.get("go/late"), b"late")
    n = s.num_keys()
    if n < 4:
        expect("num_keys at least 4", n, 4)
    if len(sys.argv) > 4 and sys.argv[4] == "timeout":
        try:
            s.wait(["py/never"], datetime.timedelta(seconds=1))
            expect("wait for a key never set", "returned", "raised")
        except Exception:
            pass
        s.set("py/after-timeout", "ok")
        expect("get after a timed-out wait", s.get("py/after-timeout"), b"ok")
    p = dist.PrefixStore("/worker/attempt_0", s)
    p.set("pk", "prefixed")
    print("OK", flush=True)


def server():
    s = store("127.0.0.1", 0, True)
    print("PORT", s.port, flush=True)
    s.set("from-py", "hello from python")
    dist.PrefixStore("/worker/attempt_0", s).set("pk", "prefixed")
    s.wait(["go/done"], datetime.timedelta(seconds=120))
    expect("get of a key Go set", s.get("go/x"), b"gx")
    expect("counter Go added to", s.get("go/n"), b"12")
    expect("Go's compare-and-set", s.get("go/c"), b"second")
    expect("Go's prefixed key", dist.PrefixStore("/worker/attempt_1", s).get("gk"), b"gv")
    if hasattr(s, "check"):
        expect("Go's deleted key", s.check(["go/deleted"]), False)
    print("OK", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "client":
        client(sys.argv[2], int(sys.argv[3]))
    else:
        server()
