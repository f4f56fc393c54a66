"""Run under an engine's Python: for each [MODEL_DIR, MAX_MODEL_LEN] on stdin (a JSON list), what the
engine's own ModelConfig does (EngineArgs(...).create_model_config(), the step of `vllm serve`
that derives the context and refuses a longer one). Prints one JSON list of
{"max_model_len": the engine's, "refused": its message or null}. Python 3.10."""

import json
import sys


def main() -> None:
    from vllm.engine.arg_utils import EngineArgs

    out = []
    for model, length in json.loads(sys.stdin.read()):
        try:
            args = EngineArgs(model=model, tokenizer=model, max_model_len=length, dtype="float32")
            # 0.6+ builds the model config alone; 0.5.5 only as the first step of the engine's.
            config = args.create_model_config() if hasattr(args, "create_model_config") else args.create_engine_config().model_config
            out.append({"max_model_len": config.max_model_len, "refused": None})
        except (ValueError, NotImplementedError) as exc:
            text = str(exc)
            out.append({"max_model_len": None, "refused": text if "max_model_len" in text else f"other: {text}"})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
