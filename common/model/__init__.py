"""Reading the mounted model: read-only, bounded access to its files (modeldir), what its config
states (head size, context length, traits and value classes), which tokenizer and processor it
ships, and its safetensors headers. The bottom layer: it imports nothing else of the package."""
