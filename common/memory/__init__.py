"""Whether a model fits the card: its weights (from the safetensors headers, or estimated from
config.json) and one request's KV cache, by the engine's own rules (memory_fit). Stands on the
model and the engine; the rules (KV) and doctor read it."""
