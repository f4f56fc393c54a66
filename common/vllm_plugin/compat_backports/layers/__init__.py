"""What several backport families are built from (the shared layers), apart from the families:
the decoder most of them subclass, built from vLLM 0.5.5's own layers (decoder), per-layer
sliding windows (windows), per-layer head sizes and shared keys and values (heads),
YaRN with its own attention factor (yarn), the Gated DeltaNet arithmetic (gated_delta) and its
state per sequence (sequence_state), a multimodal checkpoint's text model (text_of_vlm), and
routed experts with an activation the engine's FusedMoE lacks (gated_experts)."""
