"""What several backport families are built from (the shared layers), apart from the families:
the decoder most of them subclass, built from vLLM 0.5.5's own layers (decoder), per-layer
sliding windows (windows), per-layer head sizes and shared keys and values (heads),
YaRN with its own attention factor (yarn), the Gated DeltaNet arithmetic (gated_delta) and its
state per sequence (sequence_state), a multimodal checkpoint's text model (text_of_vlm), and
routed experts with an activation the engine's FusedMoE lacks (gated_experts). What the backports
of both engine generations share (vLLM 0.5.5's model API and the V1 engine's): the checkpoint's
stacked projection names (stacking), the experts' loading into the engine's FusedMoE (experts), a
vision-language checkpoint's text (text_of_vlm: ServedAsText, ServedAsTextV1), and Qwen3.5's
config checks and skipped MTP head (hybrid)."""
