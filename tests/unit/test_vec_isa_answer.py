"""The engine hosts answer torch's vector-instruction probe once (harness/vec_isa.py): a fork
of the host compiles for the sets a fresh interpreter's probe found, without probing again, and
the host itself never asks torch for CUDA (else no fork could start CUDA, and a card's engine that
reaches for it on the CPU build would refuse otherwise than in the image). Checked with the dev
venv's torch in a fresh interpreter, the way a host runs: no engine is started."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HOST = """
import json, os, subprocess, sys
import torch
from harness import vec_isa

answer = vec_isa.answer_once()
module = vec_isa._module()
asked_cuda = torch.cuda.is_initialized() or torch.cuda._is_in_bad_fork()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    spawned = []
    real = subprocess.Popen.__init__
    def spy(self, args, *a, **k):
        spawned.append(str(args)[:80])
        return real(self, args, *a, **k)
    subprocess.Popen.__init__ = spy
    chosen = str(module.pick_vec_isa())
    listed = [str(i) for i in module.valid_vec_isa_list()]
    os.write(write, json.dumps({"listed": listed, "chosen": chosen, "spawned": spawned,
                                "bad_fork": torch.cuda._is_in_bad_fork()}).encode())
    os._exit(0)
os.waitpid(pid, 0)
child = json.loads(os.read(read, 1 << 16))
print(json.dumps({"answer": answer, "asked_cuda": asked_cuda, "child": child}))
"""


def test_a_fork_of_the_host_uses_the_probes_answer_and_probes_no_more() -> None:
    done = subprocess.run([sys.executable, "-c", HOST], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["answer"], "a fresh interpreter's probe named the usable sets"
    assert got["child"]["listed"] == got["answer"]
    assert got["child"]["chosen"] == got["answer"][0]
    assert got["child"]["spawned"] == [], "the fork built and loaded no test library"
    assert got["asked_cuda"] is False and got["child"]["bad_fork"] is False
