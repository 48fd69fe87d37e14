#!/usr/bin/env python3
"""The application of the compose scenario (tests/container.rs).

Reads the tree tend publishes behind /site/current in a tight loop, the way
an application should: the link is resolved once per read (a directory
descriptor), and every file is opened relative to it. Each tree holds
`token` and a `count`: files a and b, and files/0..count-1, all carrying
the token of their revision.

  MODE=pair   reads a and b: a pair from two revisions is a mix.
  MODE=tree   reads every file: a file missing or of another revision is
              an incomplete tree.

Serves POST /reload on :8080 (tend's HTTP hook): each call is recorded with
the tree the link pointed at when it came. Results go to /results as JSON,
replaced atomically twice a second.
"""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SITE = "/site/current"
OUT = "/results"
MODE = os.environ.get("MODE", "pair")

lock = threading.Lock()
stats = {
    "mode": MODE,
    "reads": 0,          # complete reads of one tree
    "no_link": 0,        # the link was not there yet
    "tree_gone": 0,      # the tree was removed while being read
    "mixed": 0,          # pair: a and b from two revisions
    "incomplete": 0,     # tree: a file missing or from another revision
    "examples": [],
    "tokens": [],        # distinct tokens seen, in order
}
hooks = []


def read_at(fd, name):
    f = os.open(name, os.O_RDONLY, dir_fd=fd)
    try:
        return os.read(f, 1 << 16).decode()
    finally:
        os.close(f)


def once():
    try:
        fd = os.open(SITE, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return "no_link", None
    finding = "mixed" if MODE == "pair" else "incomplete"
    try:
        token = read_at(fd, "token")
        if MODE == "pair":
            a, b = read_at(fd, "a"), read_at(fd, "b")
            if not (a == b == token):
                return finding, {"token": token, "a": a, "b": b}
            return "reads", token
        count = int(read_at(fd, "count"))
        for i in range(count):
            got = read_at(fd, "files/%d" % i)
            if got != token:
                return finding, {"token": token, "file": i, "got": got}
        return "reads", token
    except FileNotFoundError as e:
        # Trees beyond link_keep are removed, and a reader still in one
        # may lose its files; the tree the link points at must be whole.
        if still_current(fd):
            return finding, {"missing": e.filename, "in": os.readlink(SITE)}
        return "tree_gone", None
    finally:
        os.close(fd)


def still_current(fd):
    try:
        now = os.stat(SITE)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def reader():
    while True:
        what, detail = once()
        with lock:
            stats[what] += 1
            if what == "reads" and (not stats["tokens"] or stats["tokens"][-1] != detail):
                stats["tokens"].append(detail)
            elif what in ("mixed", "incomplete") and len(stats["examples"]) < 10:
                stats["examples"].append(detail)


def dump(name, value):
    tmp = os.path.join(OUT, "." + name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.rename(tmp, os.path.join(OUT, name))


def writer():
    while True:
        with lock:
            s = json.loads(json.dumps(stats))
            h = list(hooks)
        dump("reads.json", s)
        dump("hooks.json", h)
        time.sleep(0.5)


class Reload(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            linked = os.readlink(SITE)
        except OSError:
            linked = None
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {"unparsed": body.decode(errors="replace")}
        with lock:
            hooks.append({"path": self.path, "body": parsed, "linked": linked})
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=writer, daemon=True).start()
    ThreadingHTTPServer(("0.0.0.0", 8080), Reload).serve_forever()
