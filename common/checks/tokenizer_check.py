"""Does a tokenizer overlay load in this Python's transformers, with the model's own ids?

usage: python tokenizer_check.py OVERLAY_DIR MODEL_DIR
Prints one JSON line, engine_checks.py's answer to {"kind": "tokenizer", "overlay": OVERLAY_DIR,
"model": MODEL_DIR} (ok, reason, class, special_ids, torch_loaded...). Kept for callers of
verify.run_check that name this script; run_checks batches every request into one process.
"""

import json
import sys

import engine_checks  # its directory is this script's, first on sys.path when run as a script


def main():
    if len(sys.argv) != 3:
        print(json.dumps({"ok": False, "reason": "usage: tokenizer_check.py OVERLAY_DIR MODEL_DIR"}))
        return 2
    engine_checks.answer_all([{"kind": "tokenizer", "overlay": sys.argv[1], "model": sys.argv[2]}])
    return 0


if __name__ == "__main__":
    sys.exit(main())
