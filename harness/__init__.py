"""The engine harness: real vLLM engines on this CPU, shared by the tests, the conformance matrix
(conformance/) and the scripts (make demo, make bench). Nothing in it is a test, and nothing in it
imports from tests/: a change to a test never moves a conformance cell's fingerprint.

  engine.py          an engine venv, `vllm serve` (or the image's launcher) started and talked to over HTTP
  engine_host.py     an engine pre-imported once whose starts are forks; engine_hosts.py: one per venv and worker
  engine_worker.py   the conformance cells' worker (one engine import, a fork per cell); vec_isa.py its probe's answer
  engine_env.py      the environment every engine start of the harness gets (on every cell's start path)
  containers.py      card-image containers run the way the platform runs them
  cores.py, ports.py where a start may run and listen; starts.py counts every engine start
  vllm_caches.py     vLLM's model-class inspections written into the engine venvs' caches (make vllm-caches)
  fixtures/          tiny models made by code, the way their authors' transformers save them
"""
