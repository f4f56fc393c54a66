"""What an image checks of itself: at build, that its Python finds the vLLM plugin only when asked
(vllm_plugin_check); after build, `docker run IMAGE selftest` (selftest, with selftest_recorder as
vLLM's stand-in). Read by nothing else of the package."""
