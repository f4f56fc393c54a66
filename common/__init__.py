"""enginex-compat runtime: the preflight that repairs a model for a card's engine, then starts vLLM.

Runs inside the card images on their own Python (3.10 on BI-100, 3.12 elsewhere): standard
library only on the clean path. transformers is imported only in verification subprocesses.
"""

import os

__version__ = "0.1.0"

# The image's vLLM plugin (entry point, backports, config classes, patches): the directory the
# repairs put on the engine's PYTHONPATH.
PLUGIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_plugin")
