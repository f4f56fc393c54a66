"""The start path: the preflight that runs the rules into a Plan (preflight), how repairs reach the
engine (model_view, overlay, workdir), the verification of repairs with the engine's own Python
(verify), and `launch`, which execs `vllm serve` with them. Stands on the rules and below."""
