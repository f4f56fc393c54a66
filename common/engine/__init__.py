"""What a card's engine is and takes: its profile (profiles/, baked into the image), the engine
venvs a checkout answers with, vLLM's arguments and how repairs join them, what the conformance
matrix proved on it (conformance_cells.json, model_fields.json), the attention backends' head
sizes, the chat templates R2 writes, and the one way to patch an installed library's source.
Reads the model (common/model/); nothing above it."""
